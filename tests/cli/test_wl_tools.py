"""The wl-* tools on shards written by ShardWriter: each tool's main run in this process as its console
script runs it (`here`: exit status, stdout and stderr as bytes; the worker processes of -p N and the
shell commands of wl-xargs are real), and as a real subprocess (its console script) where a signal, a
kill or stdin is the point."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import uuid

import numpy as np
import pytest

from conftest import soon
from wl_tasks import die_on_two, fail_late_and_early, fail_on_key, slow_square

from tensorcom import shards
from tensorcom.cli.wlcommon import run_tasks
from tensorcom.errors import WorkerDied, WorkerError

pytestmark = pytest.mark.procs

TOOLS = ["wl-cat", "wl-extract", "wl-dump", "wl-info", "wl-test", "wl-map", "wl-xargs"]
NSAMPLES, PER_SHARD = 12, 6
TIMEOUT = 90


def make_sample(i: int) -> dict:
    """Sample i of the test dataset: every kind of field the tools treat differently."""
    rng = np.random.default_rng(i)
    return {
        "__key__": f"s{i:02d}",
        "cls": i % 3,
        "txt": f"text {i}\twith tab" if i == 4 else f"text {i}",
        "json": {"i": i, "name": f"n{i}"},
        "png": rng.integers(0, 256, size=(8 + i, 10, 3), dtype=np.uint8),
        "bin": rng.bytes(100 + i),
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(brace URL of 2 shards x 6 samples, the raw samples as the reader gives them)."""
    root = tmp_path_factory.mktemp("wl")
    with shards.ShardWriter(str(root / "data-%06d.tar"), maxcount=PER_SHARD) as sink:
        for i in range(NSAMPLES):
            sink.write(make_sample(i))
    url = str(root / "data-{000000..000001}.tar")
    raw = list(shards.samples(url))
    assert [s["__key__"] for s in raw] == [f"s{i:02d}" for i in range(NSAMPLES)]
    return url, raw


def tool_command(name: str) -> list[str]:
    """The console script next to this interpreter, or the same main run with -c."""
    script = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(script):
        return [script]
    module = "tensorcom.cli." + name.replace("-", "_")
    return [sys.executable, "-c", f"import sys; sys.argv[0] = {name!r}; from {module} import main; sys.exit(main())"]


def run(popen, name: str, *args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    """Run tool `name` with `args` to completion (bounded), capturing stdout and stderr as bytes."""
    proc = popen.start(tool_command(name) + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=cwd, env=env)
    out, err = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def here(capsysbinary, monkeypatch):
    """Call as here(name, *args, cwd=None, env=None): tool `name`'s main run in this process with
    sys.argv as its console script has it, in directory `cwd`, with the variables `env` added to the
    environment; a CompletedProcess with its exit status and its stdout and stderr as bytes."""

    def call(name: str, *args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
        main = importlib.import_module("tensorcom.cli." + name.replace("-", "_")).main
        if cwd is not None:
            monkeypatch.chdir(cwd)
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setattr(sys, "argv", [name, *args])
        capsysbinary.readouterr()
        try:
            status = main(list(args)) or 0
        except SystemExit as exc:
            status = exc.code
        out, err = capsysbinary.readouterr()
        return subprocess.CompletedProcess([name, *args], status, out, err)

    return call


def assert_usage_error(result: subprocess.CompletedProcess, *words: str) -> None:
    """Exit status 2 and exactly one stderr line containing every word."""
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.parametrize("name", TOOLS)
def test_help(here, name):
    result = here(name, "--help")
    assert result.returncode == 0
    assert result.stdout.decode().startswith(f"usage: {name}")


@pytest.mark.parametrize("name,extra", [("wl-cat", ["txt"]), ("wl-extract", []), ("wl-dump", ["-o", "x"]),
                                        ("wl-info", []), ("wl-test", []), ("wl-map", ["-e", "sample"]),
                                        ("wl-xargs", ["-c", "true"])])
def test_missing_shard_is_one_line_and_status_2(here, tmp_path, name, extra):
    missing = str(tmp_path / "nothing-here.tar")
    result = here(name, missing, *extra, cwd=tmp_path)
    assert_usage_error(result, "nothing-here.tar")


def test_bad_url_scheme_is_one_line_and_status_2(here):
    assert_usage_error(here("wl-cat", "nosuch://host/x.tar", "txt"))


def test_cat_writes_raw_bytes_after_skip(here, data):
    url, raw = data
    assert here("wl-cat", url, "bin").stdout == raw[0]["bin"]
    assert here("wl-cat", url, "bin", "7").stdout == raw[7]["bin"]  # second shard
    assert here("wl-cat", url, "jpg;png", "3").stdout == raw[3]["png"]
    assert here("wl-cat", url, "__key__", "11").stdout == b"s11"


def test_cat_missing_field_or_sample(here, data):
    url, _ = data
    assert_usage_error(here("wl-cat", url, "jpg", "2"), "s02", "jpg")
    assert_usage_error(here("wl-cat", url, "txt", str(NSAMPLES)), "after skipping")


def test_extract_tsv(here, data):
    url, _ = data
    result = here("wl-extract", url, "-f", "__key__,cls", "txt", "json", "png", "-c", "5")
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 5
    assert lines[1].split("\t")[:3] == ["s01", "1", "text 1"]
    assert json.loads(lines[1].split("\t")[3]) == {"i": 1, "name": "n1"}
    assert lines[4].split("\t")[2] == "text 4\\twith tab"  # escaped, so columns stay aligned
    assert all(line.split("\t")[4].endswith(" bytes>") for line in lines)


def test_extract_json_lines_with_skip_and_missing(here, data):
    url, raw = data
    result = here("wl-extract", url, "-f", "__key__ cls json nope", "--json", "-s", "10")
    rows = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert rows == [{"__key__": f"s{i}", "cls": i % 3, "json": {"i": i, "name": f"n{i}"}, "nope": None}
                    for i in (10, 11)]


def test_extract_decode_error_names_shard_key_and_field():
    from tensorcom.cli.wl_extract import extract
    from tensorcom.errors import SampleError

    sample = {"__key__": "k1", "__url__": "x.tar", "cls": b"3", "json": b"{bad"}
    assert extract(sample, ["__key__", "cls"]) == {"__key__": "k1", "cls": 3}
    with pytest.raises(SampleError, match="JSONDecodeError") as info:
        extract(sample, ["json"])
    assert info.value.url == "x.tar" and info.value.member == "k1.json"


def test_dump_writes_key_ext_files(here, data, tmp_path):
    url, raw = data
    out = tmp_path / "dump"
    result = here("wl-dump", url, "-o", str(out), "-c", "4", "-f", "bin", "txt")
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == sorted(f"s{i:02d}.{e}" for i in range(4) for e in ("bin", "txt"))
    assert (out / "s02.bin").read_bytes() == raw[2]["bin"]
    assert (out / "s03.txt").read_text() == "text 3"
    assert "8 files from 4 samples" in result.stderr.decode()


@pytest.mark.parametrize("order", ["options first", "url between"])
def test_extract_and_dump_take_the_url_after_list_options(here, data, tmp_path, order):
    # -f takes several words: `-f a b URL` used to swallow the URL as a field
    url, raw = data
    fields = ["-f", "__key__", "cls"]
    argv = [*fields, url, "-c", "3"] if order == "options first" else ["-c", "3", url, *fields]
    result = here("wl-extract", *argv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == [f"s{i:02d}\t{i % 3}" for i in range(3)]
    out = tmp_path / "dump"
    result = here("wl-dump", "-f", "bin", "txt", url, "-o", str(out), "-c", "2")
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == sorted(f"s{i:02d}.{e}" for i in range(2) for e in ("bin", "txt"))


@pytest.mark.parametrize("tool, argv, expected", [
    ("wl_cat", ["-s", "x.tar", "txt", "3"], None),
    ("wl_cat", ["x.tar", "--no-end-blocks", "txt"], {"url": "x.tar", "field": "txt", "require_end_blocks": False}),
    ("wl_extract", ["-f", "a", "b", "x.tar"], {"url": "x.tar", "fields": ["a", "b"]}),
    ("wl_extract", ["x.tar", "-f", "a", "b", "--json"], {"url": "x.tar", "fields": ["a", "b"], "json": True}),
    ("wl_dump", ["-o", "d", "-f", "a", "x.tar", "-c", "2"], {"url": "x.tar", "fields": ["a"], "count": 2}),
    ("wl_info", ["-c", "5", "x.tar", "--json"], {"url": "x.tar", "count": 5, "json": True}),
    ("wl_test", ["-d", "rgb8", "x.tar", "-p", "2"], {"url": "x.tar", "decode": "rgb8", "processes": 2}),
    ("wl_map", ["-e", "sample", "x.tar", "-o", "o.tar"], {"url": "x.tar", "expr": "sample", "output": "o.tar"}),
    ("wl_xargs", ["-c", "true", "-f", "a", "b", "x.tar", "-p", "2"], {"url": "x.tar", "fields": ["a", "b"],
                                                                     "processes": 2}),
])
def test_options_before_between_and_after_the_url(tool, argv, expected):
    import importlib

    parse = importlib.import_module(f"tensorcom.cli.{tool}").parse
    if expected is None:  # `-s` needs a number: x.tar is not one, whatever the order
        with pytest.raises(SystemExit):
            parse(argv)
        return
    args = vars(parse(argv))
    assert {key: args[key] for key in expected} == expected


def test_dump_quotes_slashes_in_keys(here, tmp_path):
    with shards.TarWriter(str(tmp_path / "k.tar")) as sink:
        sink.write({"__key__": "a/b", "txt": "hello"})
    here("wl-dump", str(tmp_path / "k.tar"), "-o", str(tmp_path / "d"))
    assert os.listdir(tmp_path / "d") == ["a%2Fb.txt"]


def test_info_json(here, data):
    url, raw = data
    result = here("wl-info", url, "--json", "-c", "10")
    info = json.loads(result.stdout)
    assert info["samples"] == 10
    assert info["keysets"] == [{"fields": ["bin", "cls", "json", "png", "txt"], "count": 10}]
    fields = info["fields"]
    assert fields["cls"]["range"] == [0, 2] and fields["cls"]["types"] == ["int"]
    assert fields["png"]["dtypes"] == ["uint8"]
    assert fields["png"]["shapes"][0] == [8, 10, 3] and fields["png"]["shapes"][-1] == [17, 10, 3]
    assert fields["bin"]["bytes"]["min"] == 100 and fields["bin"]["bytes"]["max"] == 109
    assert fields["txt"]["len"] == [6, len("text 4\twith tab")]


def test_info_text(here, data):
    url, _ = data
    text = here("wl-info", url).stdout.decode()
    assert text.startswith(f"samples\t{NSAMPLES}\n")
    assert "\njson\n" in text and "\tshapes\t" in text


@pytest.mark.parametrize("extra", [[], ["-d", "rgb8", "-p", "2"]])
def test_test_counts_samples_and_bytes(here, data, extra):
    url, raw = data
    result = here("wl-test", url, "--json", *extra)
    report = json.loads(result.stdout)
    assert report["samples"] == NSAMPLES
    assert report["bytes"] == sum(len(v) for s in raw for k, v in s.items() if not k.startswith("__"))
    assert report["samples_per_s"] > 0 and report["MB_per_s"] > 0


def test_test_figures_keep_significant_digits():
    """12 samples of 4000 bytes read in 2 s: 0.002 MB/s, not rounded away to 0 (a loaded machine)."""
    from tensorcom.cli.wl_test import rates

    assert rates(12, 4000, 2.0) == {"samples": 12, "bytes": 4000, "seconds": 2.0, "samples_per_s": 6.0,
                                    "MB_per_s": 0.002}
    assert rates(100, 424588, 0.031234567)["MB_per_s"] == 13.594


def processes_with_marker(marker: str) -> list[int]:
    """Pids of live processes whose environment holds `marker` (processes a tool left behind)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as stream:
                if marker.encode() in stream.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def commands_with_marker(marker: str, program: str) -> list[int]:
    """Pids of the processes_with_marker that run `program` (the first word of their command line)."""
    found = []
    for pid in processes_with_marker(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as stream:
                argv = stream.read().split(b"\0")
        except OSError:
            continue
        if program.encode() in argv[:3]:
            found.append(pid)
    return found


def marked_env() -> tuple[dict, str]:
    """(this environment with a fresh marker variable, "NAME=VALUE" of the marker) for a subprocess."""
    marker = f"WL_TEST_MARKER={uuid.uuid4().hex}"
    name, value = marker.split("=")
    return dict(os.environ, **{name: value}), marker


def mark_here(monkeypatch) -> str:
    """A fresh marker variable set in this environment (for the test): the processes a tool run `here`
    starts carry it, this process's /proc environ does not. Returns "NAME=VALUE". This process's
    multiprocessing resource tracker is started first: started by the tool's first pool, it would carry
    the marker and outlive the run (it serves every later pool of this process)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    _, marker = marked_env()
    monkeypatch.setenv(*marker.split("="))
    return marker


@pytest.mark.parametrize("procs", ["0", "2"])
def test_map_expression_in_order(here, data, tmp_path, procs, monkeypatch):
    url, raw = data
    marker = mark_here(monkeypatch)
    expr = 'dict(sample, cls=int(sample["cls"]) + 10, txt=sample["txt"].decode().upper())'
    pattern = str(tmp_path / "out-%04d.tar")
    result = here("wl-map", url, "-e", expr, "-o", pattern, "-p", procs, "--maxcount", "5")
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(tmp_path)) == ["out-0000.tar", "out-0001.tar", "out-0002.tar"]
    out = list(shards.samples(str(tmp_path / "out-{0000..0002}.tar")))
    assert [s["__key__"] for s in out] == [s["__key__"] for s in raw]
    assert [int(s["cls"]) for s in out] == [int(s["cls"]) + 10 for s in raw]
    assert out[3]["txt"] == b"TEXT 3" and out[3]["bin"] == raw[3]["bin"]
    assert processes_with_marker(marker) == []


def test_map_module_function_drops_and_splits(here, data, tmp_path):
    url, raw = data
    (tmp_path / "mymod.py").write_text(
        "def f(sample):\n"
        "    if int(sample['cls']) == 0:\n        return None\n"
        "    return [{'txt': sample['txt']}, {'__key__': sample['__key__'] + '-b', 'cls': 1}]\n")
    result = here("wl-map", url, "-m", "mymod.py:f", "-o", "all.tar", "-p", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = list(shards.samples(str(tmp_path / "all.tar")))
    kept = [s for s in raw if int(s["cls"]) != 0]
    assert [s["__key__"] for s in out] == [k for s in kept for k in (s["__key__"], s["__key__"] + "-b")]
    assert out[0]["txt"] == kept[0]["txt"]


@pytest.mark.parametrize("procs", ["0", "2"])
def test_map_error_names_the_key_and_leaves_no_process(here, data, tmp_path, procs, monkeypatch):
    url, _ = data
    marker = mark_here(monkeypatch)
    expr = 'sample if sample["__key__"] != "s07" else 1 / 0'
    result = here("wl-map", url, "-e", expr, "-o", str(tmp_path / "o.tar"), "-p", procs)
    assert_usage_error(result, "ZeroDivisionError", "s07")
    assert processes_with_marker(marker) == []


def test_map_bad_expression_and_module(here, data):
    url, _ = data
    assert_usage_error(here("wl-map", url, "-e", "sample[", "-o", "x.tar"), "sample[")
    assert_usage_error(here("wl-map", url, "-m", "no_such_module_xyz:f"), "no_such_module_xyz")


@pytest.mark.parametrize("procs", ["0", "2"])
def test_xargs_collects_files_in_order(here, data, tmp_path, procs):
    url, raw = data
    command = 'tr a-z A-Z < sample.txt > sample.up && printf %s "$KEY" > sample.key && rm sample.txt'
    result = here("wl-xargs", url, "-c", command, "-f", "txt,cls", "-o", str(tmp_path / "x-%03d.tar"),
                 "-p", procs, "--maxcount", "100")
    assert result.returncode == 0, result.stderr
    out = list(shards.samples(str(tmp_path / "x-000.tar")))
    assert [s["__key__"] for s in out] == [s["__key__"] for s in raw]
    assert all(sorted(k for k in s if not k.startswith("__")) == ["cls", "key", "up"] for s in out)
    assert out[5]["up"] == b"TEXT 5" and out[5]["key"] == b"s05" and out[5]["cls"] == raw[5]["cls"]


def test_xargs_failure_names_the_key(here, data, tmp_path):
    url, _ = data
    result = here("wl-xargs", url, "-c", '[ "$KEY" != s03 ]', "-o", str(tmp_path / "o.tar"))
    assert_usage_error(result, "s03", "status 1")


def test_xargs_skip_errors_counts(here, data, tmp_path):
    url, raw = data
    result = here("wl-xargs", url, "-c", 'case "$KEY" in s0[2-4]) exit 3;; esac', "--skip-errors",
                 "-p", "2", "-o", str(tmp_path / "o.tar"), "-f", "cls")
    assert result.returncode == 0, result.stderr
    assert "skipped 3 samples" in result.stderr.decode() and "s02" in result.stderr.decode()
    keys = [s["__key__"] for s in shards.samples(str(tmp_path / "o.tar"))]
    assert keys == [s["__key__"] for s in raw if s["__key__"] not in ("s02", "s03", "s04")]


def test_xargs_timeout_kills_command_and_background(here, data, tmp_path, monkeypatch):
    url, _ = data
    marker = mark_here(monkeypatch)
    result = here("wl-xargs", url, "-c", "sleep 60 & sleep 60", "--timeout", "0.5", "-p", "2")
    assert_usage_error(result, "timed out", "s0")
    assert processes_with_marker(marker) == []


@pytest.fixture(scope="module")
def data25(tmp_path_factory):
    """One shard of 25 samples k00..k24 (a txt field each)."""
    path = tmp_path_factory.mktemp("wl25") / "in.tar"
    with shards.TarWriter(str(path)) as sink:
        for i in range(25):
            sink.write({"__key__": f"k{i:02d}", "txt": f"text {i}"})
    return str(path)


FAIL_AT_10 = {"wl-map": ["-e", 'sample if sample["__key__"] != "k10" else 1 / 0'],
              "wl-xargs": ["-c", '[ "$KEY" != k10 ]']}


@pytest.mark.parametrize("name", ["wl-map", "wl-xargs"])
@pytest.mark.parametrize("procs", ["0", "2"])
def test_failure_leaves_no_partial_output(here, data25, tmp_path, name, procs):
    result = here(name, data25, *FAIL_AT_10[name], "-o", str(tmp_path / "out.tar"), "-p", procs)
    assert_usage_error(result, "k10", f"abandoned shard {tmp_path / 'out.tar'} holding 10 samples")
    assert os.listdir(tmp_path) == []
    result = here(name, data25, *FAIL_AT_10[name], "-o", str(tmp_path / "o-%02d.tar"), "--maxcount", "4",
                 "-p", procs)
    assert_usage_error(result, "k10", f"abandoned shard {tmp_path / 'o-02.tar'} holding 2 samples")
    assert sorted(os.listdir(tmp_path)) == ["o-00.tar", "o-01.tar"]
    out = shards.samples(str(tmp_path / "o-{00..01}.tar"))
    assert [s["__key__"] for s in out] == [f"k{i:02d}" for i in range(8)]


def test_tools_read_every_shard_whatever_rank(here, data):
    url, _ = data
    lines = here("wl-extract", url, env={"RANK": "1", "WORLD_SIZE": "2"}).stdout.decode().splitlines()
    assert lines == [f"s{i:02d}" for i in range(NSAMPLES)]


def test_xargs_killed_leaves_no_process(popen, data):
    url, _ = data
    env, marker = marked_env()
    tool = popen.start(tool_command("wl-xargs") + [url, "-c", "sleep 60", "-p", "2"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert soon(lambda: len(commands_with_marker(marker, "sleep")) >= 2, 30)  # both workers busy
    tool.kill()  # SIGKILL: no cleanup in the tool itself; the workers must notice and clean up
    tool.wait(timeout=10)
    assert soon(lambda: processes_with_marker(marker) == [], 10), processes_with_marker(marker)


def test_extract_reads_stdin_and_pipes(popen, data):
    url, raw = data
    first = raw[0]["__url__"]
    with open(first, "rb") as stdin:
        proc = popen.start(tool_command("wl-extract") + ["-", "-f", "__key__", "cls"], stdin=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    assert out.decode().splitlines() == [f"s{i:02d}\t{i % 3}" for i in range(PER_SHARD)]
    # stopping early on a pipe: source is not an error, even though the command dies of SIGPIPE
    result = run(popen, "wl-extract", f"pipe:cat {first}", "-c", "1")
    assert result.returncode == 0 and result.stdout == b"s00\n", result.stderr


def test_xargs_interrupted_leaves_no_process(popen, data):
    url, _ = data
    env, marker = marked_env()
    tool = popen.start(tool_command("wl-xargs") + [url, "-c", "sleep 60", "-p", "2"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert soon(lambda: len(commands_with_marker(marker, "sleep")) >= 2, 30)
    tool.send_signal(signal.SIGINT)  # Ctrl-C: the tool closes its pool, the workers kill their commands
    _, err = tool.communicate(timeout=TIMEOUT)
    assert tool.returncode == 130, err
    assert soon(lambda: processes_with_marker(marker) == [], 10), processes_with_marker(marker)


# run_tasks, the process map behind wl-map, wl-xargs and wl-test (the functions it maps: tests/cli/wl_tasks.py)

@pytest.mark.parametrize("processes", [0, 3])
def test_run_tasks_keeps_input_order(processes):
    assert list(run_tasks(slow_square, range(20), processes)) == [x * x for x in range(20)]
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("processes", [0, 2])
def test_run_tasks_error_names_the_key(processes):
    samples = [{"__key__": f"k{i}"} for i in range(8)]
    with pytest.raises(WorkerError) as info:
        list(run_tasks(fail_on_key, samples, processes))
    assert info.value.key == "k3" and "KeyError" in str(info.value)
    assert "fail_on_key" in info.value.remote_traceback
    assert multiprocessing.active_children() == []


def test_run_tasks_reports_the_first_failure_in_input_order():
    samples = [{"__key__": f"k{i}"} for i in range(8)]
    with pytest.raises(WorkerError, match="slow failure") as info:
        list(run_tasks(fail_late_and_early, samples, 2))
    assert info.value.key == "k2"
    assert multiprocessing.active_children() == []


def test_run_tasks_dead_worker_is_reported():
    with pytest.raises(WorkerDied, match="status 7"):
        list(run_tasks(die_on_two, range(6), 2))
    assert multiprocessing.active_children() == []


def test_run_tasks_closing_early_stops_workers():
    results = run_tasks(slow_square, range(1000), 2)
    assert next(results) == 0
    results.close()
    assert multiprocessing.active_children() == []


def test_run_tasks_rejects_negative_processes():
    with pytest.raises(ValueError, match="-1"):
        run_tasks(slow_square, range(3), -1)


def test_truncated_shard_is_reported_unless_end_blocks_are_waived(here, data, tmp_path):
    url, raw = data
    whole = url.replace("{000000..000001}", "000000")
    cut = tmp_path / "cut.tar"
    blob = open(whole, "rb").read()
    end = len(blob.rstrip(b"\0"))  # the last member ("txt") ends in text, not in zero bytes
    cut.write_bytes(blob[:end + (-end % 512)])  # every member whole, the end-of-archive blocks gone
    result = here("wl-info", str(cut))
    assert result.returncode != 0
    assert "truncated tar archive" in result.stderr.decode() and str(cut) in result.stderr.decode()
    result = here("wl-extract", "--no-end-blocks", str(cut), "-f", "__key__")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == [s["__key__"] for s in raw[:PER_SHARD]]


@pytest.mark.parametrize("tool, argv", [("wl_map", ["-e", "sample"]), ("wl_xargs", ["-c", "true"])])
def test_progress_lines_on_a_plain_stderr_and_none_with_quiet(data, tmp_path, monkeypatch, capsys, tool, argv):
    """stderr is not a terminal here: plain lines every $TENSORCOM_PROGRESS_INTERVAL seconds, none with -q."""
    import importlib

    main = importlib.import_module(f"tensorcom.cli.{tool}").main
    prog = tool.replace("_", "-")
    url, _ = data
    monkeypatch.setenv("TENSORCOM_PROGRESS_INTERVAL", "0.000001")
    assert main([url, *argv, "-o", str(tmp_path / "a-%04d.tar"), "--maxcount", "5"]) == 0
    lines = capsys.readouterr().err.splitlines()
    progress = [line for line in lines if line.startswith(f"{prog}: ") and "samples/s" in line]
    assert progress and progress[-1].startswith(f"{prog}: {NSAMPLES} samples, 3 shards, "), lines
    assert lines[-1] == f"{prog}: {NSAMPLES} samples out"
    assert main([url, *argv, "-o", str(tmp_path / "b-%04d.tar"), "--quiet"]) == 0
    assert capsys.readouterr().err.splitlines() == [f"{prog}: {NSAMPLES} samples out"]


def test_dump_refuses_a_sample_that_lacks_a_chosen_field(here, data, tmp_path):
    """wl-dump used to skip a missing field silently; it is the one missing-field rule's SampleError now."""
    url, _ = data
    result = here("wl-dump", url, "-o", str(tmp_path / "dump"), "-c", "2", "-f", "bin,webp;gif")
    message = result.stderr.decode()
    assert result.returncode != 0 and "'webp;gif'" in message and "'s00'" in message, message
