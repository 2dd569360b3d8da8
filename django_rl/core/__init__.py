"""The core: policies and their registry, deciding a request (``engine``, ``together``).

Also rates, identities, key names, the deny cache, the outage fallback and
the reset token: everything a decision needs besides Redis (``backends``),
the algorithms (``algorithms``) and HTTP (``http``).
"""
