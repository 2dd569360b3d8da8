"""Figures the reliability suites measure, printed at the end of the run.

``make test`` shows them in a section of the terminal summary, so the numbers
quoted in docs/reliability.md can be read off any run.
"""

from __future__ import annotations

from typing import Any

import pytest

FIGURES = pytest.StashKey[dict[str, list[str]]]()


def record(config: Any, section: str, line: str) -> None:
    """Add ``line`` to ``section`` of the summary."""
    config.stash.setdefault(FIGURES, {}).setdefault(section, []).append(line)


def report(terminalreporter: Any, config: Any) -> None:
    for section, lines in config.stash.get(FIGURES, {}).items():
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(line)
