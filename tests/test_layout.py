"""The package's structure: subpackages stacked in the order data flows, each importing only those
below it, no import cycle, no private name used outside its module.  Read from the sources (AST),
every import counted: module level, inside functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
import sys
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
    "vdbflow": {"vdbflow"},  # the public names, imported on first use (vdbflow/__init__.py __getattr__)
    "vdbflow.core.topology": {"vdbflow.core.volume", "vdbflow.io.nanovdb"},  # Topology.with_data, to_nvdb
    "vdbflow.core.volume": {
        "vdbflow.ops.sampling",
        "vdbflow.ops.hessian",
        "vdbflow.ops.coverage",
        "vdbflow.io.volumes",
        "vdbflow.io.nanovdb",
    },
    # the CUDA backend and CuPy's emulation, loaded when a GPU (or its emulation) is asked for: each imports
    # vdbflow.devices, which picks the backend of a call
    "vdbflow.devices": {"vdbflow.devices.cuda", "vdbflow.devices.cpu"},
    "vdbflow.devices.cuda_arrays": {"vdbflow.devices.emulation"},
    "vdbflow.devices.pipeline": {"vdbflow.devices.cuda", "vdbflow.devices.emulation"},
}
# what validating a job config may load: the kernels' facts, the tables, the names of choices
CONFIG_MODULES = {
    "vdbflow",
    "vdbflow._core",
    "vdbflow.core",
    "vdbflow.core.kernel",
    "vdbflow.core.outputs",
    "vdbflow.core.value_types",
    "vdbflow.devices",
    "vdbflow.errors",
    "vdbflow.io",  # its __init__ imports nothing
    "vdbflow.io.location",  # paths and URLs (the standard library; fsspec only when a URL is read)
    "vdbflow.jobs",
    "vdbflow.jobs.config",
    "vdbflow.jobs.config.base",
    "vdbflow.jobs.config.inputs",
    "vdbflow.jobs.config.model",
    "vdbflow.jobs.config.output",
    "vdbflow.jobs.config.reduce",
    "vdbflow.jobs.publish",  # a docstring: the room of the writers, whose table names the formats
    "vdbflow.jobs.publish.writers",
    "vdbflow.ops",
    "vdbflow.ops.request",
    "vdbflow.synthetic",
    "vdbflow.synthetic.steady",
    "vdbflow.temporal",
    "vdbflow.temporal.interpolation",
    "vdbflow.temporal.steps",
}
# functions whose imports are their work: a job's imports made ahead on each worker process
IMPORTING_FUNCTIONS = {"vdbflow.jobs.runner._warm_worker"}
# standard modules of one platform, imported where used
PLATFORM_MODULES = {"fcntl", "msvcrt"}


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


def _function_bodies(tree: ast.Module) -> dict[ast.AST, str]:
    """Every import made inside a function (run when it is called) -> the function's qualified name."""
    found: dict[ast.AST, str] = {}

    def visit(node: ast.AST, scope: list[str], in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                found[child] = ".".join(scope)
            named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            visit(
                child,
                [*scope, child.name] if named else scope,
                in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
            )

    visit(tree, [], False)
    return found


def _loaded_at_import(tree: ast.Module, deferred: dict[ast.AST, str]) -> list[ast.AST]:
    """The imports a module makes when it is imported: not in a function, not under ``if TYPE_CHECKING`` nor
    under ``if "xarray" in sys.modules`` (made when the library is loaded already)."""
    checking = {
        n
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and any(k in ast.unparse(node.test) for k in ("TYPE_CHECKING", "sys.modules"))
        for n in ast.walk(node)
    }
    return [
        n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n not in deferred.keys() | checking
    ]


def _library(name: str) -> str | None:
    """``name`` if it is a module of a third-party library (beyond NumPy), else None."""
    top = name.split(".")[0]
    return None if top in ("vdbflow", "numpy", "") or top in sys.stdlib_module_names else name


def _loads_more(target: str, loaded: set[str]) -> bool:
    """Whether importing library module ``target`` may load more than the modules ``loaded`` (its package's
    ``__init__`` does not import every submodule: ``dask.array`` loads pandas and xarray, ``dask`` does not)."""
    return not any(target == m or m.startswith(target + ".") or "." in m and target.startswith(m + ".") for m in loaded)


def _import_targets(module: str, node: ast.AST, known: set[str]) -> list[str]:
    """The modules an import statement loads: third-party and standard names, and each vdbflow module with
    the packages above it (their ``__init__`` runs first)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = _resolve(module, module == "vdbflow" or any(k.startswith(module + ".") for k in known), node)
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        names = subs or [base]
    targets = []
    for name in names:
        parts = name.split(".")
        targets += [".".join(parts[:i]) for i in range(1, len(parts) + 1)] if parts[0] == "vdbflow" else [name]
    return targets


def libraries_loaded(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Each vdbflow module of ``modules`` (name -> parsed source) -> the third-party library modules (beyond NumPy)
    and the vdbflow modules importing it loads."""
    known = set(modules) | {"vdbflow._core"}
    direct: dict[str, set[str]] = {}
    below: dict[str, set[str]] = {}
    for module, tree in modules.items():
        targets = [
            t for n in _loaded_at_import(tree, _function_bodies(tree)) for t in _import_targets(module, n, known)
        ]
        direct[module] = {lib for t in targets if (lib := _library(t))} | {t for t in targets if t in modules}
        below[module] = {t for t in targets if t in modules and t != module}
    loaded: dict[str, set[str]] = {}

    def visit(m: str, path: tuple[str, ...]) -> set[str]:
        if m not in loaded:
            loaded[m] = set(direct[m])
            for t in below[m] - set(path):
                loaded[m] |= visit(t, (*path, m))
        return loaded[m]

    for m in modules:
        visit(m, ())
    return loaded


def needless_deferred_imports() -> list[tuple[Path, int, str]]:
    """(file, line, import) of each import inside a function that defers nothing: a module-level import
    would load no library the module does not load already.  Deferred stay: a declared facade's
    (``FACADES``), a third-party library the module does not load, a vdbflow module that loads one, a
    module of one platform, the imports of ``IMPORTING_FUNCTIONS``, and a config module's import of a module
    config validation does not load (``CONFIG_MODULES``)."""
    modules = _modules()
    known = set(modules) | {"vdbflow._core"}
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    loaded = libraries_loaded(modules)
    needless = []
    for module, tree in modules.items():
        for node, function in _function_bodies(tree).items():
            if f"{module}.{function}" in IMPORTING_FUNCTIONS:
                continue
            targets = _import_targets(module, node, known)
            saves = set()
            for t in targets:
                if t.split(".")[0] in PLATFORM_MODULES or any(
                    t == f or t.startswith(f + ".") for f in FACADES.get(module, ())
                ):
                    saves.add(t)
                elif (lib := _library(t)) and _loads_more(lib, loaded[module]):
                    saves.add(lib)
                elif t in loaded and any(_loads_more(lib, loaded[module]) for lib in loaded[t] if _library(lib)):
                    saves.add(t)
                elif (
                    module in CONFIG_MODULES and t in loaded and ({t} | loaded[t]) - CONFIG_MODULES - {"vdbflow._core"}
                ):
                    saves.add(t)  # config validation loads the config's modules only
            if not saves:
                needless.append((paths[module], node.lineno, ast.unparse(node)))
    return needless


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


def test_imports_inside_functions_defer_a_library():
    """An import is made inside a function only to keep a library (beyond NumPy) off the import of a module
    that does not need it (``vdbflow.io.location`` imports fsspec only when a URL is read), or as a declared
    facade: every other import is at module level."""
    needless = [f"{p.relative_to(PACKAGE.parent)}:{line}: {text}" for p, line, text in needless_deferred_imports()]
    assert not needless, "imports inside functions that defer no library:\n" + "\n".join(needless)


def test_checker_sees_a_needless_deferred_import():
    tree = ast.parse("import numpy\n\ndef f():\n    import json\n    from vdbflow.core import tree\n")
    deferred = _function_bodies(tree)
    assert sorted(n.lineno for n in deferred) == [4, 5] and set(deferred.values()) == {"f"}
    assert _loaded_at_import(tree, deferred)[0].lineno == 1
    assert _library("zarr.storage") == "zarr.storage" and _library("json") is None and _library("numpy.linalg") is None
    assert _loads_more("dask.array", {"dask"}) and not _loads_more("dask", {"dask.array"})
    assert not _loads_more("dask.array.core", {"dask.array"}) and not _loads_more("zarr", {"zarr"})


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
