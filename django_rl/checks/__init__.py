"""``manage.py check``: every settings problem found before a request meets it.

``validation`` judges the settings, ``system`` registers the checks,
``connection_checks``, ``topology_checks`` and ``server_checks`` are those
that connect, ``acl`` gives the least-privilege ACL rule.
"""
