"""Where the documentation lives on the web, for hints and messages a pip user reads.

A pip install has no ``docs/`` folder, so a message that sends a user to the
documentation names a URL made here, never a path in the repository.
"""

from __future__ import annotations

#: The project's home; ``setup.cfg``'s ``project_urls`` name the same place.
HOME = "https://github.com/django-rl/django-rl"

#: The documentation pages (``docs/<page>.md`` in the repository).
DOCS = f"{HOME}/blob/main/docs/"


def doc_url(page: str, anchor: str = "") -> str:
    """Return the URL of documentation page ``page`` (e.g. ``"migrating"``), at ``anchor``."""
    url = f"{DOCS}{page.removesuffix('.md')}.md"
    return f"{url}#{anchor}" if anchor else url
