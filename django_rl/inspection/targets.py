"""How each policy's identities write a client's address, for overrides and the operator's tools.

An override of ``203.0.113.9`` must match the identity requests from that
address have under its policy, which depends on the policy:

* a policy of settings, of code or inline: its ``key`` (``ip``,
  ``user_or_ip``, ``anon``: ``ip:<address>`` grouped by ``IPV4_PREFIX`` /
  ``IPV6_PREFIX``; ``user``, ``header:``...: never an address);
* the django-ratelimit drop-in's (``@<group>`` without an inline
  ``@ratelimit`` of that group): ``ip:<address>`` grouped by
  ``RATELIMIT_IPV4_MASK`` / ``RATELIMIT_IPV6_MASK``;
* the DRF and Ninja drop-ins' (``drf.<scope>``, ``ninja.<scope>``): they count by cache key,
  ``throttle_<scope>_<address>`` (DRF's ``cache_format``, each address on
  its own), and passes beside it the ``ip:`` identity of that address,
  grouped by the settings' prefixes, which overrides match.

:func:`address_form` says which; the override loader compares targets by it
(handed over by the app's ``ready``), the admin's form judges targets by it,
and ``manage.py ratelimit inspect``/``reset`` turn an address into the
identity as counted (:func:`address_identity`).
"""

from __future__ import annotations

from collections.abc import Mapping

from django_rl.conf import get_settings
from django_rl.contrib.drf_policies import policy_name as drf_policy_name
from django_rl.contrib.ninja_policies import POLICIES as NINJA_POLICIES
from django_rl.contrib.ratelimit.conf import ipv4_mask, ipv6_mask
from django_rl.core.addresses import normalize_address
from django_rl.core.identities import UNKNOWN_IP, AddressForm
from django_rl.core.identities import address_form as key_address_form
from django_rl.core.reprs import short_repr
from django_rl.overrides.rules import TargetError, normalize_target, split_address
from django_rl.policies.inline import url_specs
from django_rl.policies.registry import registered_policies

#: DRF's ``SimpleRateThrottle.cache_format``, which the drop-in keeps: the
#: identity of an address is ``throttle_<scope>_<address>``.
DRF_CACHE_FORMAT = "throttle_%(scope)s_%(ident)s"
#: The DRF drop-in's cache keys hold each address on its own (DRF's ``get_ident``).
_DRF_PREFIXES = (32, 128)


def address_form(policy: str) -> AddressForm | None:
    """Return how overrides of the policy named ``policy`` compare addresses; ``None``: never.

    A policy of settings, code or inline: as its key writes them. The
    django-ratelimit drop-in's group: ``ip:`` by its masks. The DRF drop-in's
    (``drf.<scope>``): ``ip:`` by the settings' prefixes, the identity the
    drop-in passes beside its cache key (``Policy.hit(also=)``). A name no
    policy has is taken as the ``ip`` key's, under the settings.

    :raises ConfigurationError: if the settings are invalid.
    """
    settings = get_settings()
    specs = {**registered_policies(), **settings.policies}
    spec = specs.get(policy)
    if isinstance(spec, Mapping):
        return key_address_form(spec.get("key", "user_or_ip"), settings.addresses)
    if policy.startswith("@"):
        for inline in url_specs():  # an inline policy of that group: its key's
            if inline.name == policy:
                return key_address_form(inline.policy_spec().get("key"), settings.addresses)
        # The django-ratelimit drop-in's group.
        return AddressForm("ip:", ipv4_mask(), ipv6_mask())
    return AddressForm("ip:", settings.ipv4_prefix, settings.ipv6_prefix)


#: The throttle drop-ins (DRF's, Ninja's: the same cache keys) by family: their names of a scope.
_THROTTLE_FAMILIES = (("drf", drf_policy_name), ("ninja", NINJA_POLICIES.name))


def _drf_head(policy: str) -> str | None:
    """Return ``throttle_<scope>_``, how a throttle drop-in policy's cache keys start, or ``None``.

    The DRF drop-in's (``drf.<scope>``) and the Ninja drop-in's (``ninja.<scope>``).
    """
    if policy in {**registered_policies(), **get_settings().policies}:
        return None  # a policy of that name in settings is not the drop-in's
    for family, name_of in _THROTTLE_FAMILIES:
        if policy != family and not policy.startswith(f"{family}."):
            continue
        scope = policy.removeprefix(family).removeprefix(".") or None
        if name_of(scope) != policy:
            return None  # a digest of a scope, which the name cannot give back
        return DRF_CACHE_FORMAT % {"scope": scope, "ident": ""}
    return None


def dropin_target(policy: str, text: str) -> str:
    """Return ``text`` as the drop-in's policy ``policy`` counts it: a user, for the DRF drop-in.

    The DRF drop-in counts a signed-in user as ``throttle_<scope>_<pk>``
    (``get_cache_key``), so ``user:42`` is that under ``drf.<scope>``;
    ``drf.anon`` (``AnonRateThrottle``) never throttles one. Any other
    ``text``, or policy, is returned as it is.

    :raises TargetError: for a user under ``drf.anon``.
    """
    head = _drf_head(policy)
    if head is None or not text.strip().startswith("user:"):
        return text
    if policy in ("drf.anon", "ninja.anon"):
        raise TargetError(
            f"{short_repr(text)}: policy {policy!r} (an AnonRateThrottle) never throttles "
            "signed-in users: name an address"
        )
    return head + text.strip().removeprefix("user:")


def address_identity(policy: str, text: str) -> str | None:
    """Return the identity requests from the address ``text`` have under ``policy``, as counted.

    ``text`` as an operator types it (``127.0.0.1``, ``IP:127.0.0.1``,
    ``127.0.0.1:8000``, ``[2001:db8::1]:443``): ``ip:127.0.0.1``, grouped by
    the policy's prefix (``ip:10.1.2.0`` for ``10.1.2.3`` under
    ``IPV4_PREFIX`` 24; the DRF drop-in's ``throttle_anon_127.0.0.1``).
    ``None`` when ``text`` is no address (an identity such as ``user:42``).

    :raises TargetError: for a network (not one identity), or an address
        under a policy that counts none; the message says what to type.
    """
    text = text.strip()
    tagged, body = split_address(text)
    if tagged is None or text.lower() == UNKNOWN_IP:
        return None
    if tagged and "/" not in body and normalize_address(body) is None:
        return None  # "ip:" and no address: an identity as code may have counted it
    head = _drf_head(policy)
    # The DRF drop-in's keys hold the address as DRF's get_ident gives it, each alone.
    form = address_form(policy) if head is None else AddressForm(head, *_DRF_PREFIXES)
    found = normalize_target(text, form, policy)
    if "/" in found:
        raise TargetError(
            f"{short_repr(text)} is a network: name one address (such as "
            f"{found.removeprefix('ip:').partition('/')[0]}) or one identity"
        )
    return found
