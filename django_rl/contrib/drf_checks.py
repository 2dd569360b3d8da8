"""``manage.py check`` for the DRF drop-in: its rates parse (``django_rl.E090``).

DRF takes any rate whose period starts with s, m, h or d (``"5/mango"`` is 5
a minute); the drop-in parses strictly and would raise on the first
request. So a project that switches learns of such a rate from the check,
not from a 500. Reads ``REST_FRAMEWORK`` only; imports no DRF.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, register

from django_rl.checks.names import SETTINGS_TAG
from django_rl.contrib.drf_policies import MODULE
from django_rl.core.rates import RateError, parse_rate
from django_rl.core.reprs import short_repr


@register(SETTINGS_TAG)
def check_drf_rates(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report each rate of ``DEFAULT_THROTTLE_RATES`` that the drop-in cannot parse.

    Only when ``DEFAULT_THROTTLE_CLASSES`` names a class of the drop-in
    (``django_rl.contrib.drf.``); ``None`` (not throttled) is fine.
    """
    rest = getattr(django_settings, "REST_FRAMEWORK", None)
    if not isinstance(rest, Mapping):
        return []
    classes = rest.get("DEFAULT_THROTTLE_CLASSES", ())
    if not any(isinstance(path, str) and path.startswith(MODULE) for path in classes):
        return []
    rates = rest.get("DEFAULT_THROTTLE_RATES", {})
    errors: list[CheckMessage] = []
    for scope, rate in rates.items() if isinstance(rates, Mapping) else ():
        if rate is None:
            continue
        try:
            parse_rate(rate)
        except RateError as exc:
            errors.append(
                Error(
                    f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'][{short_repr(scope)}]: {exc}",
                    hint="The DRF drop-in (django_rl.contrib.drf) parses rates strictly: "
                    "write e.g. '5/min', '100/hour', '1000/day' or '10/5m', or None for no limit.",
                    id="django_rl.E090",
                )
            )
    return errors
