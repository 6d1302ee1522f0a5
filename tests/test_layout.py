"""The package's structure: subpackages stacked in the order data flows, each importing only those
below it, no import cycle, no private name used outside its module.  Read from the sources (AST),
every import counted: module level, inside functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vdbflow"

# rank of each part of the package: a module may import from lower ranks and from its own subpackage
LAYERS = {
    "errors": 0,
    "version": 0,
    "_core": 0,
    "core": 1,
    "devices": 2,
    "io": 2,
    "ops": 3,
    "analysis": 4,
    "synthetic": 4,
    "distribution": 5,
    "temporal": 6,
    "jobs": 7,
    "": 8,  # vdbflow/__init__.py: the public API, above everything
}
PRIVATE_MODULES_ALLOWED = {"vdbflow._core"}  # the compiled extension: the kernels' entry points
# the only modules that call the compiled extension: the backends, and the kernel facts and record
CORE_IMPORTERS = ("vdbflow.devices", "vdbflow.core.kernel")
MAX_MODULE_LINES = 700
# The only imports upwards (and the only import cycles): methods of the data classes that hand the work to
# another module, importing it when called (as xarray's Dataset.to_zarr imports its Zarr backend).
# module -> what it may import so.
FACADES = {
    "vdbflow.core.topology": {"vdbflow.core.volume", "vdbflow.io.nanovdb"},  # Topology.with_data, to_nvdb
    "vdbflow.core.volume": {
        "vdbflow.ops.sampling",
        "vdbflow.ops.hessian",
        "vdbflow.ops.coverage",
        "vdbflow.io.volumes",
        "vdbflow.io.nanovdb",
    },
}


def _module_name(path: Path) -> str:
    parts = ["vdbflow", *path.relative_to(PACKAGE).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _part(module: str) -> str:
    """The layer key of a vdbflow module: its subpackage, or the top-level module's name."""
    rest = module.split(".")[1:]
    return rest[0] if rest else ""


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _deferred_lines(tree: ast.Module) -> set[int]:
    """Lines of the imports made inside a function body (run when the function is called)."""
    lines: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines |= {n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def _imports(module: str, tree: ast.Module, known: set[str]) -> list[tuple[str, list[str], int]]:
    """(imported vdbflow module, names taken from it, line) for every import in a module."""
    is_package = module == "vdbflow" or f"{module}.__init__" in known or any(k.startswith(module + ".") for k in known)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "vdbflow":
                    found.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            if target.split(".")[0] != "vdbflow":
                continue
            names = [a.name for a in node.names]
            submodules = [n for n in names if f"{target}.{n}" in known]
            if submodules:  # from vdbflow.core import tree: an import of vdbflow.core.tree
                found.extend((f"{target}.{n}", [], node.lineno) for n in submodules)
            rest = [n for n in names if f"{target}.{n}" not in known]
            if rest or not submodules:
                found.append((target, rest, node.lineno))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, list[tuple[str, list[str], int]]]:
    modules = _modules()
    known = set(modules) | {"vdbflow._core"}
    return {m: _imports(m, tree, known) for m, tree in modules.items()}


def test_every_part_has_a_layer(graph):
    assert {_part(m) for m in graph} <= set(LAYERS), sorted({_part(m) for m in graph} - set(LAYERS))


def test_imports_only_go_down(graph):
    """Every import goes down the layers, but the FACADES: imports inside a method, of listed modules."""
    deferred = {m: _deferred_lines(tree) for m, tree in _modules().items()}
    climbing = []
    for module, imports in graph.items():
        here = _part(module)
        for target, _, line in imports:
            there = _part(target)
            if there == here:
                continue
            if LAYERS[there] >= LAYERS[here]:
                if line in deferred[module] and target in FACADES.get(module, ()):
                    continue
                climbing.append(f"{module}:{line} imports {target} ({there!r} is not below {here!r})")
    assert not climbing, "\n".join(climbing)


def test_checker_sees_a_facade_at_module_level():
    """A facade's import is allowed inside a function only: at module level it climbs."""
    tree = ast.parse("from vdbflow.ops.sampling import sample\n\ndef f():\n    from vdbflow.ops.hessian import h\n")
    assert _deferred_lines(tree) == {4}


def test_no_import_cycle(graph):
    """No cycle among the imports (a facade's deferred import runs after both modules are loaded)."""
    edges = {
        m: {t for t, _, _ in imports if t in graph and t != m and t not in FACADES.get(m, ())}
        for m, imports in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycle = stack[stack.index(t) :] + [t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_private_name_crosses_a_module(graph):
    crossing = []
    for module, imports in graph.items():
        for target, names, line in imports:
            if target.rpartition(".")[2].startswith("_") and target not in PRIVATE_MODULES_ALLOWED:
                crossing.append(f"{module}:{line} imports private module {target}")
            crossing += [
                f"{module}:{line} imports {target}.{n}"
                for n in names
                if n.startswith("_") and not n.startswith("__") and f"{target}.{n}" not in PRIVATE_MODULES_ALLOWED
            ]
    modules = _modules()
    for module, tree in modules.items():
        # attributes read with a leading underscore on anything but self/cls, e.g. vol._data
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                owner = _defines_attribute(tree, node.attr)
                if not owner:
                    crossing.append(f"{module}:{node.lineno} reads .{node.attr}, defined elsewhere")
    assert not crossing, "\n".join(crossing)


def _defines_attribute(tree: ast.Module, name: str) -> bool:
    """Whether the module itself defines ``name`` (as a function, class, method, or self attribute)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, (ast.Name,)) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.arg) and node.arg == name:
            return True
    return False


def test_checker_sees_a_climbing_import(tmp_path):
    """The checker itself: a module of core importing ops is reported."""
    tree = ast.parse("from vdbflow.ops.sampling import sample\n")
    found = _imports("vdbflow.core.fake", tree, {"vdbflow.ops.sampling", "vdbflow.core.fake"})
    assert found == [("vdbflow.ops.sampling", ["sample"], 1)]
    assert LAYERS[_part(found[0][0])] > LAYERS[_part("vdbflow.core.fake")]


def test_only_the_backends_and_kernel_facts_import_the_extension(graph):
    """``vdbflow._core`` is reached through ``vdbflow.devices`` (the backends) and ``vdbflow.core.kernel``
    (the kernels' facts and argument record) only."""
    importers = sorted(
        f"{module}:{line}"
        for module, imports in graph.items()
        for target, _, line in imports
        if target == "vdbflow._core" and not any(module == m or module.startswith(m + ".") for m in CORE_IMPORTERS)
    )
    assert not importers, "modules importing vdbflow._core outside devices/ and core/kernel.py:\n" + "\n".join(
        importers
    )
    assert any(t == "vdbflow._core" for t, _, _ in graph["vdbflow.devices.cpu"])  # the checker sees the real one


def test_no_module_is_too_long():
    """Modules hold one subject each: none over MAX_MODULE_LINES lines."""
    long = sorted(
        f"{p.relative_to(PACKAGE.parent)}: {n} lines"
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    )
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)
