"""Images resized as a process without torch resizes them (torch is optional for tensorcom).

A dedicated serving process imports torch for its fast resize when its outputs are 128 px or more
(tensorcom.images.imagenet.Augment.TORCH_RESIZE_MIN), about 1.5 s of CPU per process. A test whose
point is not the resize starts such servers with `torchless_env(folder)`: `import torch` fails in them
and in the processes they spawn, and the resize takes Pillow's path. A test that compares a server's
pixels with batches made here (Pillow's, for outputs below 128 px or without torch) makes those in
`pillow_resize()`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator


def torchless_env(folder: Path) -> dict[str, str]:
    """This process's environment with `folder` first on PYTHONPATH, holding a `torch` package whose
    import raises ImportError (written there); returns the environment for subprocess.Popen."""
    package = folder / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('raise ImportError("torch is hidden from this test\'s processes")\n')
    paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@contextlib.contextmanager
def pillow_resize() -> Iterator[None]:
    """Within it, images resized in this process take Pillow's path, as in a process without torch: the
    fast path needs torch imported and on one thread (tensorcom.images.resample), so a torch on one
    thread is put on two meanwhile."""
    torch = sys.modules.get("torch")
    one = torch is not None and torch.get_num_threads() == 1
    if one:
        torch.set_num_threads(2)
    try:
        yield
    finally:
        if one:
            torch.set_num_threads(1)
