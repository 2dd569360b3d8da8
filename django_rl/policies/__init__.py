"""Policies: what a limit is, where it comes from, and how a request is decided by it.

``policy`` (one limit and its one decision), ``registry`` (policies from
settings, code and ``@ratelimit(rate=...)``), ``plans`` (a rate per request),
``inline`` (the decorator's own policies), ``engine`` (a request's limits
decided and recorded: the one path every front door takes), ``together``
(several policies of one request, all or nothing), the per-process
``deny_cache`` and outage ``fallback``, and the ``reset_epoch`` token.
"""
