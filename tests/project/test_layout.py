"""The package's imports: settings flow one way, no module imports one that imports it back,
and each package imports only its own floor and the floors below (``FLOORS``).

The import graph counts every import a module makes, function-local ones included
(a deferred import is still a dependency), and leaves out ``if TYPE_CHECKING:`` blocks
(types only, never run): the graph the reviewers' structure tool draws.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "django_rl"

#: The packages of django_rl from the bottom up, one floor a list (docs/architecture.md,
#: "Layout"). A module may import modules of its own floor and of the floors below,
#: never above. An entry names a package or module under ``django_rl`` (``core``,
#: ``conf``), or a module inside one (``http.headers``): a module's floor is that of
#: its longest entry. ``__init__`` is ``django_rl/__init__.py`` itself.
FLOORS: list[list[str]] = [
    # The values every floor shares, the settings' one reader, errors, names.
    ["core", "exceptions", "conf", "docs_urls", "signals"],
    # Redis: connections, nodes, clusters, scripts, RESP; the documented CLIENT_CLASS.
    ["backends", "redis_cluster"],
    ["algorithms"],
    ["leases", "observability"],
    # The overrides and their table.
    ["overrides", "models"],
    # Policies, their registry, deciding a request, plans, inline policies, the
    # deny cache, the outage fallback, the reset token.
    ["policies"],
    # The HTTP side of a Decision: headers, the 429, slots.
    ["http"],
    # The front doors, and what looks at the whole.
    [
        "decorators",
        "drf_views",
        "throttling",
        "views",
        "middleware",
        "testing",
        "__init__",
        "checks",
        "inspection",
        "contrib",
        "admin",
        "management",
        "apps",
    ],
]

#: Imports allowed against the floors, each with the reason it may go up:
#: ``(importing module, imported module): why``. Keep it short: each entry is a
#: dependency the layout does not explain.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


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


def all_modules() -> dict[str, Path]:
    """Every module of the package by dotted name; migrations are Django's, not the layout's."""
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_lines(name: str, path: Path, modules: dict[str, Path]) -> dict[str, list[int]]:
    """Return each django_rl module ``name`` imports, with the lines that import it.

    Every import counts, function-local ones included; the body of an ``if
    TYPE_CHECKING:`` is left out (its ``else`` is not). ``from a import b``
    imports ``a.b`` when that is a module, else ``a``; relative imports are
    resolved from ``name``'s package.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, list[int]] = {}

    def add(dotted: str, line: int) -> None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        if dotted and dotted != name:
            found.setdefault(dotted, []).append(line)

    def visit(nodes: Iterable[ast.AST]) -> None:
        for child in nodes:
            if isinstance(child, ast.If) and _is_type_checking(child):
                visit(child.orelse)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                # ``from a import b`` runs ``a`` (a package's __init__) and
                # imports ``a.b`` when that is a module.
                add(base, child.lineno)
                for alias in child.names:
                    add(f"{base}.{alias.name}", child.lineno)
            visit(ast.iter_child_nodes(child))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {imported: sorted(set(lines)) for imported, lines in found.items()}


def import_graph() -> tuple[dict[str, Path], dict[str, dict[str, list[int]]]]:
    """Return the modules and, for each, what it imports with the lines (every import)."""
    modules = all_modules()
    return modules, {name: import_lines(name, path, modules) for name, path in modules.items()}


def where(modules: dict[str, Path], name: str, lines: list[int]) -> str:
    """``django_rl/x.py:12,40`` for the lines of module ``name``."""
    path = modules[name].relative_to(PACKAGE.parent)
    return f"{path}:{','.join(str(line) for line in lines)}"


def circles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Return the import circles: the strongly connected components of 2 modules or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(name: str) -> None:
        # Tarjan's algorithm; the package is ~120 modules deep at most.
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for other in sorted(graph[name]):
            if other not in index:
                strong(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            strong(name)
    return sorted(found)


def floor_package(name: str) -> str:
    """The FLOORS entry of module ``name``: its longest one (``core`` for
    ``django_rl.core.rates``); ``__init__`` for ``django_rl`` itself. Without an
    entry, its first name under ``django_rl``."""
    parts = name.split(".")[1:]
    entries = {entry for floor in FLOORS for entry in floor}
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in entries:
            return ".".join(parts[:end])
    return parts[0] if parts else "__init__"


def upward_imports(modules: dict[str, Path], graph: dict[str, dict[str, list[int]]]) -> list[str]:
    """Return one line per import of a higher floor than the importer's, not allowed."""
    floor_of = {package: n for n, floor in enumerate(FLOORS) for package in floor}
    offending = []
    for name in sorted(graph):
        here = floor_of[floor_package(name)]
        for imported, lines in sorted(graph[name].items()):
            if imported == "django_rl":
                # ``from django_rl import leases``: the root package runs before
                # any module of it anyway; what it imports is judged on its floor.
                continue
            there = floor_of[floor_package(imported)]
            if there > here and (name, imported) not in ALLOWED_UPWARD:
                offending.append(
                    f"{where(modules, name, lines)}: {name} (floor {here}) imports "
                    f"{imported} (floor {there})"
                )
    return offending


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


def test_the_graph_sees_function_local_imports_and_skips_type_checking(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from django_rl import conf\n"
        "if TYPE_CHECKING:\n"
        "    from django_rl.core import policy\n"
        "else:\n"
        "    import django_rl.signals\n"
        "def later():\n"
        "    from .engine import hit_many\n"
        "    from django_rl.core.rates import nowhere\n",
        encoding="utf-8",
    )
    names = ["conf", "core", "core.engine", "core.policy", "core.rates", "signals"]
    modules = dict.fromkeys(["django_rl", *(f"django_rl.{name}" for name in names)], source)
    assert import_lines("django_rl.core.probe", source, modules) == {
        "django_rl": [2],
        "django_rl.conf": [2],
        "django_rl.signals": [6],
        "django_rl.core.engine": [8],
        "django_rl.core.rates": [9],
    }
    found, graph = import_graph()
    assert len(found) > 100 and not any("migrations" in name for name in found)
    assert all(imported in found for imports in graph.values() for imported in imports)


def test_every_package_has_a_floor():
    floor_of = [package for floor in FLOORS for package in floor]
    assert len(floor_of) == len(set(floor_of)), "a package on two floors"
    modules = all_modules()
    missing = sorted({floor_package(name) for name in modules} - set(floor_of))
    assert not missing, f"packages of no floor (add them to FLOORS): {missing}"
    for importer, imported in ALLOWED_UPWARD:
        assert importer in modules and imported in modules, (importer, imported)


def test_no_import_circle_function_local_imports_included():
    modules, graph = import_graph()
    found = circles(graph)
    report = []
    for component in found:
        report.append("circle: " + " <-> ".join(component))
        members = set(component)
        for name in component:
            for imported, lines in sorted(graph[name].items()):
                if imported in members:
                    report.append(f"  {where(modules, name, lines)}: {name} imports {imported}")
    assert not found, f"{len(found)} import circles:\n" + "\n".join(report)


def test_no_import_of_a_higher_floor():
    offending = upward_imports(*import_graph())
    assert not offending, f"{len(offending)} imports of a higher floor:\n" + "\n".join(offending)
