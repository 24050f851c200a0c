"""The layers of DESIGN.md, pinned: a module imports only from its own layer or the layers before it.

Imports inside functions (lazy ones) count too. A new module must be placed in LAYERS.
"""

import ast
from pathlib import Path

import tensorcom

PACKAGE = Path(tensorcom.__file__).parent

LAYERS = [
    ["tensorcom", "errors", "settings", "torchdata"],
    ["tenbin"],
    ["wire"],
    ["urls"],
    ["connection", "sockets", "stats", "batchutil", "converters"],  # transport: the only sockets
    ["gopen", "tarscan", "_tarscan", "tarstream", "handlers", "extcodec", "writers", "shardlist", "shards"],
    ["stages", "sources", "workers", "procpipe", "shardworkers", "pipeline", "serving"],
    ["images", "imagecodec", "augment", "resample", "tjcrop", "imagefolder", "demodata"],
    ["torch_adapter", "trainer", "zcom"],  # adapters and 0.1 compatibility
    ["cli"],
]
LAYER_OF = {name: index for index, names in enumerate(LAYERS) for name in names}


def layer(module: str) -> int:
    """Layer of a module named relative to the package ("cli.wl_cat" counts as "cli")."""
    top = module.split(".")[0] if module else "tensorcom"
    return LAYER_OF[top]


def imported_modules(path: Path, module: str) -> set[str]:
    """Package modules that `path` (module `module`, relative to the package) imports, anywhere in it."""
    found = set()
    package_parts = module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "tensorcom":
                name = node.module.partition(".")[2]
            else:
                continue
            names = [name] if name else [alias.name for alias in node.names]
            found.update(names)
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "tensorcom")
    return found


def package_modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        yield path, "" if module == "__init__" else module.removesuffix(".__init__")


def test_every_module_has_a_layer():
    unplaced = [m for _, m in package_modules() if (m.split(".")[0] or "tensorcom") not in LAYER_OF]
    assert unplaced == []


def test_no_module_imports_from_a_later_layer():
    violations = []
    for path, module in package_modules():
        for dependency in imported_modules(path, module):
            if dependency.split(".")[0] in LAYER_OF and layer(dependency) > layer(module):
                violations.append(f"{module or 'tensorcom'} (layer {layer(module)}) imports {dependency} "
                                  f"(layer {layer(dependency)})")
    assert violations == []


def test_only_the_transport_layer_imports_zmq():
    transport = set(LAYERS[4])
    importers = set()
    for path, module in package_modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "zmq" for n in names):
                importers.add(module)
    assert importers and importers <= transport, importers - transport
