"""The one parent-death watcher: a worker process runs its cleanups and leaves when its parent is SIGKILLed."""

import os
import signal
import subprocess
import textwrap

import pytest
from conftest import alive, soon

PARENT = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from tensorcom.pipeline._watch import enter_worker_process, on_parent_death

    def note(path):
        with open(path, "w") as f:
            f.write("cleaned")

    def child(parent_pid, path):
        enter_worker_process(parent_pid)
        on_parent_death(lambda: note(path))
        print(os.getpid(), flush=True)
        time.sleep(60)

    if __name__ == "__main__":
        proc = multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(), sys.argv[1]))
        proc.start()
        proc.join()
""")


@pytest.mark.procs
def test_the_watcher_runs_cleanups_then_ends_the_worker(popen, tmp_path):
    script, mark = tmp_path / "parent.py", tmp_path / "cleaned"
    script.write_text(PARENT)
    parent = popen.python(str(script), str(mark), stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    assert soon(lambda: not alive(child), 30)  # the child writes the mark before it leaves
    assert mark.read_text() == "cleaned"
