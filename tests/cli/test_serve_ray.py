"""`--ray N` / `--address` of the server tools, without starting Ray: the plan they make, and the
command lines they refuse with one line (a binding URL each actor would bind, --address alone, a
publisher count beside --ray), and --cache with --ray. Serving from actors is tested on a live
instance in tests/adapters/test_ray.py."""

from __future__ import annotations

import os

import pytest

from tensorcom.cli import serve, serve_imagenet
from tensorcom.cli.common import serve_plan


def plan_of(argv: list[str], parser=serve.build_parser, workers: str = "workers"):
    args = parser().parse_args(argv)
    return serve_plan(args, getattr(args, workers) or None)  # as the tools pass it (-P 0: none)


def test_ray_n_makes_a_plan_served_by_tensorcom_ray():
    from tensorcom.adapters import ray

    plan = plan_of(["m:f", "zsplit://0.0.0.0:7880", "--ray", "3", "--address", "auto", "--ray-cpus", "2",
                    "--epochs", "4", "--min-consumers", "2"])
    assert plan.workers == 3 and plan.epochs == 4 and plan.unit == "Ray actor"
    assert plan.serve.func is ray.serve
    assert plan.serve.keywords == {"address": "auto", "resources": {"num_cpus": 2.0}}
    assert plan.options["min_consumers"] == 2 and plan.publishers() == 3


def test_without_ray_the_plan_is_tensorcom_serve():
    plan = plan_of(["m:f", "zpush://127.0.0.1:7880", "-w", "2"])
    assert plan.serve is None and plan.workers == 2 and plan.unit == "publisher"


def test_serve_imagenet_takes_ray_in_place_of_parallel_publishers():
    plan = plan_of(["zsplit://127.0.0.1:7880", "--ray", "2"], serve_imagenet.dir_parser, "parallel")
    assert plan.workers == 2 and plan.serve is not None
    with pytest.raises(ValueError, match="leave out the publisher count"):
        plan_of(["zsplit://127.0.0.1:7880", "--ray", "2", "-P", "2"], serve_imagenet.dir_parser, "parallel")


@pytest.mark.parametrize("argv,message", [
    (["m:f", "zpub://127.0.0.1:7880", "--ray", "2"], "not to a URL each would bind"),
    (["m:f", "zsplit://127.0.0.1:7880", "--address", "auto"], "give --ray N too"),
    (["m:f", "zsplit://127.0.0.1:7880", "--ray", "2", "-w", "2"], "leave out the publisher count"),
])
def test_refused_command_lines(argv, message):
    with pytest.raises(ValueError, match=message):
        plan_of(argv)


def test_a_refused_command_line_is_one_line_and_status_2(capsys):
    with pytest.raises(SystemExit) as info:
        serve.main(["tensorcom.pipeline:Pipeline", "zpub://127.0.0.1:7880", "--ray", "2"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not to a URL each would bind" in err[0]


def test_cache_with_ray_is_each_actors_directory_on_its_node():
    """Issue 20: --cache DIR goes with --ray: tensorcom serve hands it to tensorcom.ray.serve (cache=:
    DIR on each actor's node), serve-imagenet-dir's pipeline gets it absolute (the actors run in
    another working directory), with --cache-max-side."""
    args = serve.build_parser().parse_args(["m:f", "zsplit://127.0.0.1:7880", "--ray", "2", "--cache", "decoded"])
    assert serve.plan(args).options["cache"] == "decoded"
    args = serve_imagenet.dir_parser().parse_args(["zsplit://127.0.0.1:7880", "--ray", "2", "--cache", "decoded",
                                                   "--cache-max-side", "256"])
    options = serve_imagenet.pipeline_options(args)
    assert options["cache"] == os.path.abspath("decoded") and options["cache_max_side"] == 256
