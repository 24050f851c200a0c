"""examples/*.ipynb: committed without outputs, and each executed as a user runs it, cell by cell in a Jupyter
kernel of its own (nbclient): its loss falls from the first epoch to the last, its held-out accuracy beats
chance, and nothing the kernel started (the notebook's data server) is left running once the kernel is shut
down, whatever happened; the kernel's session is killed otherwise. A training cell that fails stops the
server itself, while the kernel still runs: checked in the PyTorch notebook's kernel once it has run, as a
user re-runs cells (the server cell, then a training cell that fails), which costs no second kernel."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
from test_examples import installed, learned, session_ends

pytestmark = [pytest.mark.net, pytest.mark.procs]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOKS = {"pytorch.ipynb": "torch", "keras.ipynb": "keras", "jax.ipynb": "jax"}
CELL_TIMEOUT = 120  # seconds for any one cell (training included)
BETTER_THAN = 50.0  # held-out accuracy (%): 4 classes, chance is 25%


def test_the_notebooks_are_committed_without_outputs():
    found = sorted(path.name for path in EXAMPLES.glob("*.ipynb"))
    assert set(NOTEBOOKS) <= set(found), found
    for name in found:
        notebook = json.loads((EXAMPLES / name).read_text())
        for index, cell in enumerate(notebook["cells"]):
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, f"{name}: cell {index} has outputs"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory) -> dict:
    """The environment the kernels start with: os.environ and TENSORCOM_CACHE in a temp dir, where the first
    notebook makes the small demo data set."""
    return {**os.environ, "TENSORCOM_CACHE": str(tmp_path_factory.mktemp("cache")), "PYTHONUNBUFFERED": "1"}


def client_for(name: str):
    """An nbclient NotebookClient for examples/NAME, its kernel to start in the examples folder."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    return nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                                   resources={"metadata": {"path": str(EXAMPLES)}})


def stdout_of(notebook) -> str:
    """What the notebook's code cells printed to stdout, in order."""
    return "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
                   if output.get("name") == "stdout")


@contextlib.contextmanager
def kernel(client, env: dict):
    """A fresh kernel for `client`'s notebook (a session of its own), shut down on the way out; then every
    process of its session must end within 10 s (what is left is killed)."""
    session = None
    try:
        with client.setup_kernel(env=env):
            session = client.km.provisioner.pid
            yield
    finally:
        ended = session is None or session_ends(session)
    assert ended, "the kernel's session left processes running"


def run_cells(client, indices) -> Exception | None:
    """Execute the cells `indices` of `client`'s notebook in its running kernel, up to the first that fails;
    returns that cell's CellExecutionError, or None."""
    from nbclient.exceptions import CellExecutionError

    for index in indices:
        try:
            client.execute_cell(client.nb.cells[index], index)
        except CellExecutionError as exc:
            return exc
    return None


def check_trained(client, error) -> None:
    """The notebook ran through: its loss fell, its held-out accuracy beat BETTER_THAN, its server stopped."""
    out = stdout_of(client.nb)
    assert error is None, f"{error}\n{out}"
    assert learned(out) > BETTER_THAN, out
    assert out.rstrip().endswith("server stopped"), out


@pytest.mark.slow  # 10-30 s: a kernel, the framework's import, a server, training
@pytest.mark.parametrize("name", sorted(set(NOTEBOOKS) - {"pytorch.ipynb"}))  # pytorch.ipynb: the test below
def test_notebook_trains_and_stops_its_server(name, kernel_env):
    if importlib.util.find_spec(NOTEBOOKS[name]) is None:
        pytest.skip(f"{NOTEBOOKS[name]} not installed")
    client = client_for(name)
    with kernel(client, kernel_env):
        check_trained(client, run_cells(client, range(len(client.nb.cells))))


@pytest.mark.slow
@installed("torch")
def test_pytorch_notebook_trains_and_a_failing_training_cell_stops_the_server_while_the_kernel_runs(kernel_env):
    psutil = pytest.importorskip("psutil")
    client = client_for("pytorch.ipynb")
    cells = client.nb.cells
    start = next(i for i, cell in enumerate(cells) if "server_process(" in cell.source)
    train = next(i for i, cell in enumerate(cells) if "loader = tensorcom.torch.loader" in cell.source)
    failing = cells[train].source.replace("try:\n", "try:\n    raise RuntimeError('a failing step')\n", 1)
    with kernel(client, kernel_env):
        check_trained(client, run_cells(client, range(len(cells))))
        assert run_cells(client, [start]) is None  # the server again, as a user re-runs the cell
        kernel_process = psutil.Process(client.km.provisioner.pid)
        servers = [p for p in kernel_process.children(recursive=True) if "serve_imagenet" in " ".join(p.cmdline())]
        assert len(servers) == 1, "no server (or the first one still) runs before the failing cell"
        cells[train].source = failing
        error = run_cells(client, [train])
        assert error is not None and "a failing step" in str(error), error
        assert psutil.wait_procs(servers, timeout=15)[1] == [], "the failed cell left its server running"
