"""Signals django_rl sends.

``rate_limited``: sent once for every request a policy denies, and for every
request a policy in shadow mode would have denied, from the thread that
decides it. Keyword arguments:

* ``request``: the request (Django's ``HttpRequest``, or DRF's ``Request``
  where a DRF view decided it);
* ``policy``: the policy's name (an inline policy's is ``@<group>``);
* ``identity``: what the request was counted as (``"ip:203.0.113.7"``);
* ``decision``: the :class:`~django_rl.core.decision.Decision`;
* ``shadow``: ``True`` for a shadow policy's would-be denial (the request
  was not refused for it).

The sender is the policy's name too. Receivers run before the response is
made, so keep them quick (hand slow work to a queue). A receiver that
raises never breaks the request: the error is logged on logger
``django_rl`` (at most a few lines a second) and the other receivers run.

``identity_blocked``: sent once when a block of an identity starts (a policy's
``block_for`` or ``escalate``, or ``block()``). Keyword arguments: ``policy``
(its name), ``identity`` (as counted, ``"ip:10.1.2.3"``), ``seconds`` (the
block's length, a float) and ``request`` (the request whose denial started
it, or ``None``). The sender is the policy's name; receivers that raise are
logged as ``rate_limited``'s are.

Connect like any Django signal::

    from django.dispatch import receiver
    from django_rl.signals import rate_limited

    @receiver(rate_limited)
    def note_denial(sender, request, policy, identity, decision, shadow, **kwargs):
        ...
"""

from __future__ import annotations

from django.dispatch import Signal

rate_limited = Signal()
identity_blocked = Signal()

__all__ = ["identity_blocked", "rate_limited"]
