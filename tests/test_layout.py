"""The package's imports: settings flow one way, and no module imports one that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "django_rl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, everywhere: bool) -> set[str]:
    """Return the django_rl modules ``path`` imports (at the top, or ``everywhere``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree) if everywhere else iter(tree.body)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django_rl"):
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("django_rl")}
    return {name for name in found if name is not None}


def test_conf_never_imports_validation_headers_or_policies():
    # Validation reads conf and is handed to it by AppConfig.ready (use_validator).
    found = imports(PACKAGE / "conf.py", everywhere=True)
    for below in (
        "django_rl.checks.validation",
        "django_rl.http.headers",
        "django_rl.policies.registry",
    ):
        assert not any(name == below or name.startswith(below + ".") for name in found)


def test_no_module_level_import_cycle():
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = imports(path, everywhere=False)
        # "from django_rl import engine" imports the module, not the package's __init__.
        graph[name] = {
            m
            for m in found
            if m in modules
            and m != name
            and not any(f.startswith(m + ".") and f in modules for f in found)
        }
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for dependency in sorted(graph[name]):
            visit(dependency, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
