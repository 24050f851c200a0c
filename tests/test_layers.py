"""The layers of DESIGN.md, pinned: the folder tree is the layer diagram.

A module's layer is its folder: the modules at the top of the package are the pure base (codec,
messages, URL grammar, errors, settings), each sub-package one layer. A module imports only from its
own layer or the layers before it (imports inside functions count too), and only the transport layer
imports ZeroMQ. A `_private` module is imported only from its own layer, and no two modules import each
other, directly or round a loop. Nothing here names a module: a new module is placed by the folder it is
put in.
"""

import ast
from pathlib import Path

import tensorcom

PACKAGE = Path(tensorcom.__file__).parent

# the package's folders, in layer order ("" is the top of the package: the pure base)
LAYERS = ["", "transport", "shards", "pipeline", "images", "adapters", "zcom", "demo", "cli"]


def layer(module: str) -> int:
    """Layer of a module named relative to the package: the index of its folder in LAYERS. The
    package's `__main__` (`python -m tensorcom`) is an entry point, as the console scripts are: the
    last layer."""
    if module == "__main__":
        return len(LAYERS) - 1
    parts = module.split(".") if module else []
    folder = parts[0] if len(parts) > 1 or (parts and (PACKAGE / parts[0]).is_dir()) else ""
    return LAYERS.index(folder)


def imported_modules(path: Path, module: str) -> set[str]:
    """Package modules that `path` (module `module`, relative to the package) imports, anywhere in it."""
    found = set()
    is_package = path.name == "__init__.py"
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "tensorcom":
                name = node.module.partition(".")[2]
            else:
                continue
            found.update(_submodule(name, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "tensorcom")
    return found


def _submodule(package: str, name: str) -> str:
    """`package.name` when that is a module of the package (`from tensorcom.shards import gopen`), else
    `package` (a name defined in it)."""
    full = f"{package}.{name}" if package else name
    path = PACKAGE.joinpath(*full.split("."))
    return full if path.with_suffix(".py").exists() or (path / "__init__.py").exists() else package


def package_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        yield path, "" if module == "__init__" else module.removesuffix(".__init__")


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS) - {""}


def test_no_module_imports_from_a_later_layer():
    violations = []
    for path, module in package_modules():
        for dependency in imported_modules(path, module):
            if layer(dependency) > layer(module):
                violations.append(f"{module or 'tensorcom'} (layer {LAYERS[layer(module)] or 'base'}) imports "
                                  f"{dependency} (layer {LAYERS[layer(dependency)]})")
    assert violations == []


def test_only_the_transport_layer_imports_zmq():
    importers = set()
    for path, module in package_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "zmq" for n in names):
                importers.add(module)
    assert importers and {layer(m) for m in importers} == {LAYERS.index("transport")}, importers


def test_the_layer_rule_catches_a_violation(tmp_path):
    """The checker itself: a base module importing the transport layer is reported."""
    source = tmp_path / "bad.py"
    source.write_text("from tensorcom.transport.connection import Connection\n")
    assert imported_modules(source, "bad") == {"transport.connection"}
    assert layer("transport.connection") > layer("bad")


def private(module: str) -> bool:
    """Whether `module` is private: one of its parts is `_named` (`__main__` and `__init__` are not)."""
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def test_private_modules_stay_in_their_layer():
    crossings = [f"{module or 'tensorcom'} imports {dependency}, private to layer {LAYERS[layer(dependency)] or 'base'}"
                 for path, module in package_modules() for dependency in imported_modules(path, module)
                 if private(dependency) and layer(dependency) != layer(module)]
    assert crossings == []


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in it), itself left out."""
    return {module: imported_modules(path, module) - {module} for path, module in package_modules()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` with more than one module (each sorted): the
    groups of modules that import each other round a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        for dependency in sorted(graph.get(module, ())):
            if dependency not in index:
                visit(dependency)
                low[module] = min(low[module], low[dependency])
            elif dependency in stack:
                low[module] = min(low[module], index[dependency])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_import_cycles():
    assert import_cycles(import_graph()) == []


def test_the_cycle_finder_finds_loops():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_private_and_submodule_imports_are_resolved(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text("from tensorcom.shards import gopen, samples\nfrom tensorcom.pipeline import _chain\n")
    assert imported_modules(source, "images.bad") == {"shards.gopen", "shards", "pipeline._chain"}
    assert private("pipeline._chain") and not private("pipeline") and not private("__main__")
