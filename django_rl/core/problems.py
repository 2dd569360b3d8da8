"""A configuration problem: a check id, a message and a hint (``manage.py check`` shows them)."""

from __future__ import annotations

from dataclasses import dataclass

from django_rl.exceptions import ConfigurationError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the settings."""

    id: str
    msg: str
    hint: str

    def as_exception(self) -> ConfigurationError:
        return ConfigurationError(self.msg, check_id=self.id, hint=self.hint)
