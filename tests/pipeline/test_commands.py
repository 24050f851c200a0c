"""tensorcom.pipeline.commands in-process: a sample's fields as files, the command run there, the
files it leaves as the output sample; failures name the key, or are returned with skip_errors."""

from __future__ import annotations

import pytest

from tensorcom.errors import WorkerError
from tensorcom.pipeline.commands import CommandJob, run_sample

pytestmark = pytest.mark.procs


def test_fields_in_files_out():
    job = CommandJob('tr a-z A-Z < sample.txt > sample.up && printf %s "$KEY" > sample.key', exclude=r"\.cls$")
    out = run_sample({"__key__": "k1", "txt": "hello", "cls": b"3"}, job)
    assert out == {"__key__": "k1", "key": b"k1", "txt": b"hello", "up": b"HELLO"}


def test_failure_names_the_key_or_is_returned():
    with pytest.raises(WorkerError, match="status 3") as info:
        run_sample({"__key__": "k2", "txt": "x"}, CommandJob("exit 3"))
    assert info.value.key == "k2"
    assert run_sample({"__key__": "k2"}, CommandJob("sleep 5", timeout=0.2, skip_errors=True)) == \
        ("failed", "k2", "timed out after 0.2 s")
