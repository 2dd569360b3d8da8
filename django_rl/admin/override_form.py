"""The admin's form of an override: what it judges before anything is saved."""

from __future__ import annotations

import datetime
from typing import Any, ClassVar

from django import forms
from django.utils import timezone
from django.utils.html import escape

from django_rl.algorithms import ParameterError
from django_rl.checks.validation import large_log_warning
from django_rl.core.rates import RateError
from django_rl.exceptions import ConfigurationError
from django_rl.inspection.targets import address_form, dropin_target
from django_rl.models import Override
from django_rl.overrides.rules import (
    PERCENT,
    RATE,
    WHOLE_POLICY,
    TargetError,
    is_percent_text,
    normalize_target,
)
from django_rl.policies.registry import policies_named, policy_names

#: How long a new override lasts unless the form says otherwise.
DEFAULT_DURATION = datetime.timedelta(days=1)
IDENTITY_HELP = (
    "An identity as the policy's key gives it: user:42, ip:203.0.113.9, x-api-key:..., "
    "or a digest as the live counters show it (x-api-key:~3f2a...). Or a client address "
    "(203.0.113.9, ip:<address>, <address>:<port>): the identity requests from it have "
    "under the policy, grouped by IPV4_PREFIX/IPV6_PREFIX (an IPv6 address stands for its "
    "/64 by default; the drop-ins' own rules for theirs). Or an address network, "
    "203.0.113.0/24 or 2001:db8::/48, for every client in it: no narrower than the "
    "networks the policy counts clients by."
)


class OverrideForm(forms.ModelForm):  # type: ignore[type-arg]
    """An override, judged: a known policy, a target decisions can match, a rate the policy takes.

    The identity is stored the way decisions compare it (see
    ``rules.normalize_target``); a rate is kept only for a rate override.
    """

    policy = forms.ChoiceField(help_text="The policy whose decisions change.")
    identity = forms.CharField(
        max_length=1000, label="Identity or network", help_text=IDENTITY_HELP
    )

    class Meta:
        model = Override
        fields = ("policy", "identity", "action", "rate", "expires_at", "reason")
        help_texts: ClassVar[dict[str, str]] = {
            "action": "Rate: the policy decides at another rate (its own counter). Exempt: the "
            "policy never limits it, and sends no headers for it. Block: every request is "
            "denied (429), Retry-After the time left (at most an hour). Percent: the "
            "policy's enforce_percent for every identity (write * as the identity and the "
            "percent, 0 to 100, as the rate); the others are decided in shadow mode.",
            "rate": "For a rate override only, written as in the policy (e.g. 1000/h): the "
            "policy's algorithm and other parameters stay.",
            "reason": "Why: shown in the list, for whoever looks next.",
        }
        widgets: ClassVar[dict[str, forms.Widget]] = {"reason": forms.TextInput(attrs={"size": 80})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: What the admin says besides "saved", once it is (see ``admin.OverrideAdmin``):
        #: a W020 warning of the rate.
        self.warnings: list[str] = []
        if "expires_at" in self.fields:  # (not when only viewed)
            self.fields["expires_at"].help_text = (
                f"It stops applying then: a time in {timezone.get_current_timezone_name()}, the "
                "server's time zone, as every time of the admin's rate-limit pages is shown."
            )
        for field in self.fields.values():
            # The admin writes help texts as HTML: "ip:<address>" must show as typed.
            field.help_text = escape(field.help_text)
        names = _policy_names()
        choices = [(name, name) for name in names]
        current = self.instance.policy if self.instance.pk else ""
        if current and current not in names:
            choices.append((current, f"{current} (not configured)"))
        self.fields["policy"].choices = [("", "---------"), *choices]  # type: ignore[attr-defined]
        if not self.instance.pk:
            self.fields["expires_at"].initial = lambda: timezone.now() + DEFAULT_DURATION

    def clean_expires_at(self) -> datetime.datetime:
        expires: datetime.datetime = self.cleaned_data["expires_at"]
        changed = not self.instance.pk or "expires_at" in self.changed_data
        if changed and expires <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return expires

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        action, rate = data.get("action"), (data.get("rate") or "").strip()
        if action == PERCENT:
            data["identity"] = WHOLE_POLICY  # the whole policy, whatever was typed
            if "identity" in self.errors:
                del self.errors["identity"]
            if not is_percent_text(rate):
                self.add_error("rate", "A percent override needs a number from 0 to 100.")
            data["rate"] = rate
            return data
        if data.get("policy") and data.get("identity"):
            data["identity"] = self._target(data["policy"], data["identity"])
        if action != RATE:
            data["rate"] = ""  # left over from another action: meaningless
        elif not rate:
            self.add_error("rate", "A rate override needs a rate, such as 1000/h.")
        elif data.get("policy"):
            data["rate"] = rate
            problem = _rate_problem(data["policy"], rate)
            if problem:
                self.add_error("rate", problem)
            else:
                self.warnings += _rate_warnings(data["policy"], rate)
        return data

    def _target(self, policy: str, text: str) -> str:
        """Return ``text`` as the policy's decisions compare it (an error on the field if none)."""
        try:
            return normalize_target(dropin_target(policy, text), address_form(policy), policy)
        except TargetError as exc:
            self.add_error("identity", str(exc))
        except ConfigurationError as exc:
            self.add_error("policy", f"The rate-limit settings are invalid ({exc}).")
        return text


def _policy_names() -> list[str]:
    try:
        return policy_names()
    except ConfigurationError:
        return []


def _rate_problem(name: str, rate: str) -> str:
    """Return why policy ``name`` cannot decide at ``rate`` (each policy of an inline group)."""
    for policy in policies_named(name, strict=False):
        try:
            policy.override_variant(rate)
        except (RateError, ParameterError) as exc:
            return str(exc)
        except TypeError:
            continue  # a policy made by hand: the loader logs it
    return ""


def _rate_warnings(name: str, rate: str) -> list[str]:
    """Return what ``manage.py check`` would warn about the policy at ``rate`` (W020), once."""
    found: dict[str, None] = {}
    for policy in policies_named(name, strict=False):
        try:
            algorithm = policy.override_variant(rate).algorithm
        except (RateError, ParameterError, TypeError):
            continue
        warning = large_log_warning(algorithm, f"A rate override of policy {name!r} at {rate!r}")
        if warning is not None:
            found[f"{warning.msg}. {warning.hint} ({warning.id})"] = None
    return list(found)
