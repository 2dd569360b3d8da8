"""The Python examples in README.md and docs/ run, and their settings pass the checks.

Each file's ```python blocks run in order in one namespace, like a session.
Settings a block defines (``DJANGO_RL``, with its ``CACHES``) must pass
``manage.py check`` with no error and no warning; the blocks after it run
under those settings, with every cache pointed at the suite's own Redis.
docs/http.md's examples are compared with real output in test_docs_http.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import override_settings

from django_rl.checks.system import check_settings
from tests.support.redis_server import caches_for

ROOT = Path(__file__).resolve().parent.parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
DOCS = sorted(
    path.relative_to(ROOT).as_posix()
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    if path.name != "http.md" and BLOCK.search(path.read_text(encoding="utf-8"))
)


def settings_problems(namespace: dict[str, object]) -> list[str]:
    """Return the check messages the settings in ``namespace`` produce."""
    caches = namespace.get("CACHES")
    overrides = {
        "DJANGO_RL": namespace["DJANGO_RL"],
        "ROOT_URLCONF": "tests.sites.urls_without_limits",
    }
    if caches is not None:
        overrides["CACHES"] = caches
    with override_settings(**overrides):
        return [f"{m.id}: {m.msg}" for m in check_settings()]


@pytest.fixture
def _policies_registered_in_code_are_forgotten():
    """A doc's ``register_policy`` calls last for its test only."""
    from django_rl.policies.registry import registered_policies, unregister_policy

    before = set(registered_policies())
    yield
    for name in set(registered_policies()) - before:
        unregister_policy(name)


@pytest.mark.parametrize("doc", DOCS)
@pytest.mark.usefixtures("_policies_registered_in_code_are_forgotten")
def test_examples_run(doc, redis_server):
    text = (ROOT / doc).read_text(encoding="utf-8")
    namespace: dict[str, object] = {"__name__": f"docs_example_{Path(doc).stem}"}
    test_cache = caches_for(redis_server.url)["default"]
    settings_in_force = None
    checked: tuple[int, int] | None = None
    blocks = BLOCK.findall(text)
    assert blocks
    for number, block in enumerate(blocks, start=1):
        where = f"{doc}, python block {number}"
        code = compile(block, where, "exec")
        if settings_in_force is None:
            exec(code, namespace)
        else:
            with settings_in_force:
                exec(code, namespace)
        defined = (id(namespace.get("DJANGO_RL")), id(namespace.get("CACHES")))
        if "DJANGO_RL" in namespace and defined != checked:
            assert settings_problems(namespace) == [], where
            checked = defined
            # Later blocks run under these settings, on the suite's Redis.
            aliases = namespace.get("CACHES") or {"default": None}
            assert isinstance(aliases, dict)
            settings_in_force = override_settings(
                DJANGO_RL=namespace["DJANGO_RL"], CACHES={alias: test_cache for alias in aliases}
            )


def test_every_setting_and_policy_key_is_documented():
    from django_rl.algorithms import ALL_PARAMETERS
    from django_rl.checks.validation import COMMON_KEYS
    from django_rl.conf import DEFAULTS

    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE))
    assert set(DEFAULTS) | COMMON_KEYS | ALL_PARAMETERS <= documented


def test_every_check_id_is_documented():
    emitted = set()
    for path in (ROOT / "django_rl").rglob("*.py"):
        emitted |= set(re.findall(r"django_rl\.[EWI]\d{3}", path.read_text(encoding="utf-8")))
    text = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(django_rl\.[EWI]\d{3})` \|", text, re.MULTILINE))
    assert emitted == documented


#: A table's delimiter row: ``|---|:---:|``.
DELIMITER = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")


def cells(row: str) -> int:
    """Return how many cells a table row has, as GitHub counts them.

    Every ``|`` not escaped as ``\\|`` splits cells, inside code spans too.
    """
    parts = re.split(r"(?<!\\)\|", row.strip())
    return len(parts) - (parts[0].strip() == "") - (len(parts) > 1 and parts[-1].strip() == "")


def table_faults(text: str) -> list[str]:
    """Return the table rows of markdown ``text`` that GitHub would not show as written."""
    faults = []
    lines = text.splitlines()
    in_code, header = False, None
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("```"):
            in_code, header = not in_code, None
            continue
        if in_code or not line.lstrip().startswith("|"):
            header = None
            continue
        if header is None:
            following = lines[number] if number < len(lines) else ""
            if not DELIMITER.fullmatch(following.strip()):
                faults.append(f"line {number}: a row outside a table (no header above it)")
                header = -1
            else:
                header = cells(line)
        elif header > 0 and not DELIMITER.fullmatch(line.strip()) and cells(line) != header:
            faults.append(f"line {number}: {cells(line)} cells under a header of {header}")
    return faults


def test_the_table_checker_finds_a_broken_row():
    table = "| a | b |\n|---|---|\n| `x|y` | z |\n| ok \\| ok | z |\n\n| orphan | row |\n"
    assert table_faults(table) == [
        "line 3: 3 cells under a header of 2",
        "line 6: a row outside a table (no header above it)",
    ]


@pytest.mark.parametrize(
    "doc",
    sorted(p.relative_to(ROOT).as_posix() for p in [ROOT / "README.md", *ROOT.glob("docs/*.md")]),
)
def test_every_table_row_has_its_headers_cells(doc):
    assert table_faults((ROOT / doc).read_text(encoding="utf-8")) == []


def test_the_algorithms_accepted_are_those_documented():
    from django_rl.algorithms import ALGORITHMS

    inline = {name for name, kind in ALGORITHMS.items() if kind.parameters == {"rate"}}
    text = (ROOT / "docs" / "inline.md").read_text(encoding="utf-8")
    row = re.search(r"^\| `algorithm` \| [^|]*\| (.*)$", text, re.MULTILINE)
    assert row is not None
    accepted = row[1].split("(")[0]  # what the row says is accepted, before its reasons
    assert set(re.findall(r"`(\w+)`", accepted)) == inline
    checks = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")
    e006 = re.search(r"^\| `django_rl\.E006` \|.*$", checks, re.MULTILINE)
    assert e006 is not None
    assert set(re.findall(r"`(\w+)`", e006[0])) >= set(ALGORITHMS)
