"""Forms of the live counters page: what to list, and what to reset."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import QueryDict

from django_rl.core.keys import POLICY_NAME, STORED_IDENTITY, KeyIdentity
from django_rl.inspection import FIRST_PAGE, MAX_PAGE_SIZE, PAGE_SIZE, Query

EXACT = "exact"
PREFIX = "prefix"


class QueryForm(forms.Form):
    """The page's filters, from its query string; ``query`` once valid."""

    policy = forms.CharField(required=False, max_length=64)
    q = forms.CharField(required=False, max_length=1000, label="Identity")
    match = forms.ChoiceField(
        required=False, choices=[(PREFIX, "starts with"), (EXACT, "is exactly")]
    )
    cursor = forms.CharField(required=False, max_length=30)
    size = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE_SIZE)

    query: Query

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            self.query = Query(
                policy=data.get("policy") or None,
                identity=data.get("q") or "",
                exact=data.get("match") == EXACT and bool(data.get("q")),
                cursor=data.get("cursor") or FIRST_PAGE,
                page_size=data.get("size") or PAGE_SIZE,
            )
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data

    def filters(self, **changes: str | None) -> str:
        """Return the query string of these filters with ``changes`` (``None`` drops a key)."""
        query = QueryDict(mutable=True)
        values = {name: self.data.get(name) for name in self.fields}
        values.update(changes)
        for name, value in values.items():
            if value:
                query[name] = str(value)
        return query.urlencode()


def parse_selector(value: str) -> tuple[str, KeyIdentity]:
    """Return (policy, identity) of a row's ``policy:identity`` selector.

    :raises forms.ValidationError: if it is not one.
    """
    policy, _, identity = value.partition(":")
    if not POLICY_NAME.fullmatch(policy) or not STORED_IDENTITY.fullmatch(identity):
        raise forms.ValidationError(f"{value!r} does not name a counter")
    return policy, KeyIdentity(identity)


class SelectorsField(forms.Field):
    """Row selectors (``policy:identity``), posted as a list, as (policy, identity) pairs."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[tuple[str, KeyIdentity]]:
        return list(dict.fromkeys(parse_selector(str(v)) for v in value or ()))


class UnblockForm(forms.Form):
    """The rows whose identities' blocks end (the row's own Unblock button); ``back`` as below."""

    unblock = SelectorsField()
    back = forms.CharField(required=False, max_length=2000)

    def clean_back(self) -> str:
        return QueryForm(QueryDict(self.cleaned_data.get("back", ""))).filters()


class ResetForm(forms.Form):
    """Rows to reset, and/or one identity to reset under every policy.

    Nothing is reset before ``confirmed`` is set by the confirmation page.
    ``back`` is the page's query string, to return to its filters.
    """

    rows = SelectorsField(required=False)
    identity = forms.CharField(required=False, max_length=1000)
    confirmed = forms.BooleanField(required=False)
    back = forms.CharField(required=False, max_length=2000)

    def clean_back(self) -> str:
        # Only the page's own filters go back into the redirect.
        return QueryForm(QueryDict(self.cleaned_data.get("back", ""))).filters()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors and not data.get("rows") and not data.get("identity"):
            raise forms.ValidationError("Select counters to reset, or name an identity.")
        return data
