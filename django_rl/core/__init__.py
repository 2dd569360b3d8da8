"""The values every layer shares: rates, identities, keys, the Decision, reprs, the URLconf.

Policies and deciding requests are ``django_rl.policies``; Redis is
``backends``; the algorithms ``algorithms``; HTTP ``http``.
"""
