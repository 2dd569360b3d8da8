"""Every hint that points to documentation gives a URL, never a ``docs/…`` path.

A pip install has no ``docs/`` folder. What a user reads (check messages and
hints, exception messages, log lines, command output, the admin's templates)
names documentation by ``django_rl.docs_urls.doc_url``; docstrings and
comments may keep repository paths.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.test import override_settings

from django_rl.checks.system import check_settings
from django_rl.docs_urls import DOCS, HOME, doc_url

PACKAGE = Path(__file__).resolve().parent.parent.parent / "django_rl"
ROOT = PACKAGE.parent

#: A page of the repository's docs named as a path (``docs/x.md``, ``x.md``),
#: not as the tail of a URL.
BARE_PATH = re.compile(r"(?<![/\w.-])(?:docs/[\w./-]*|[\w-]+\.md\b)")


def bare_paths(text: str) -> list[str]:
    """Return the documentation paths ``text`` names outside a URL."""
    return BARE_PATH.findall(text)


def docstrings(tree: ast.AST) -> set[int]:
    """Return the ids of the docstring nodes of ``tree``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def test_the_detector_tells_a_path_from_a_url():
    assert bare_paths("See docs/reliability.md.") == ["docs/reliability.md."]
    assert bare_paths("(security.md, 'A Redis user of its own')") == ["security.md"]
    assert bare_paths(f"See {doc_url('reliability', 'servers')}.") == []
    assert bare_paths(f"See {DOCS}") == []


def test_no_string_of_the_package_names_a_docs_path():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                if path.name == "docs_urls.py":
                    continue  # where the URLs are made
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {p}" for p in bare_paths(node.value)
                ]
    assert found == []


def test_no_template_names_a_docs_path():
    found = []
    for path in sorted((PACKAGE / "templates").rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(ROOT)}: {p}" for p in bare_paths(text)]
    assert found == []


#: Settings whose checks point to documentation: W021 (fallback above the
#: rate), W031 (no socket timeout), E060 and W061 (cluster and sentinel).
CASES = [
    {
        "CACHES": {
            "default": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": "redis://127.0.0.1:1/0",
            }
        },
        "DJANGO_RL": {
            "POLICIES": {"p": {"algorithm": "sliding_log", "rate": "5/m", "fallback_rate": "9/s"}}
        },
    },
    {
        "CACHES": {
            "default": {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": "redis://127.0.0.1:1/0",
                "OPTIONS": {
                    "REDIS_CLIENT_CLASS": "redis.cluster.RedisCluster",
                    "SOCKET_TIMEOUT": 0.1,
                    "SOCKET_CONNECT_TIMEOUT": 0.1,
                },
            }
        },
        "DJANGO_RL": {"POLICIES": {}},
    },
]


@pytest.mark.parametrize("case", CASES)
def test_check_hints_give_urls(case):
    with override_settings(ROOT_URLCONF="tests.sites.urls_without_limits", **case):
        messages = check_settings()
    assert messages
    for message in messages:
        assert bare_paths(f"{message.msg} {message.hint}") == [], message
    assert any(HOME in (message.hint or "") for message in messages), messages


def slug(heading: str) -> str:
    """Return GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_doc_url_names_a_page_and_heading_that_exist():
    named = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "doc_url":
                named.append([arg.value for arg in node.args if isinstance(arg, ast.Constant)])
    assert len(named) >= 10
    for page, *anchor in named:
        text = (ROOT / "docs" / f"{page}.md").read_text(encoding="utf-8")
        headings = {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}
        assert not anchor or anchor[0] in headings, (page, anchor)


def test_the_readme_installs_from_the_projects_url():
    # Not on PyPI yet: the install command names the repository doc_url points into.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f'pip install "django-rl[drf] @ git+{HOME}"' in readme
    assert 'pip install -e ".[drf]"' in readme
    assert not re.search(r'pip install "django-rl\[drf\]"\s', readme)
