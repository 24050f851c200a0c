"""`--metrics HOST:PORT` of the server tools: the plan passes it to tensorcom.serve, a malformed
address is a usage error, with --ray it goes to tensorcom.ray (the endpoint itself: tests/pipeline/test_observe.py);
`--no-timing` passes timing=False."""

from __future__ import annotations

import pytest

from tensorcom.cli import serve, serve_imagenet
from tensorcom.cli.common import serve_plan


def plan_of(argv: list[str], parser=serve.build_parser, workers: str = "workers"):
    args = parser().parse_args(argv)
    return serve_plan(args, getattr(args, workers) or None)


@pytest.mark.parametrize("parser,argv,workers", [
    (serve.build_parser, ["m:f", "zshare://127.0.0.1:7880"], "workers"),
    (serve_imagenet.dir_parser, ["zshare://127.0.0.1:7880"], "parallel"),
])
def test_metrics_reaches_tensorcom_serve(parser, argv, workers):
    assert plan_of([*argv, "--metrics", "127.0.0.1:0"], parser, workers).options["metrics"] == "127.0.0.1:0"
    assert "metrics" not in plan_of(argv, parser, workers).options


def test_a_malformed_address_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        serve.build_parser().parse_args(["m:f", "--metrics", "9100"])
    assert exit_.value.code == 2 and "HOST:PORT" in capsys.readouterr().err


def test_ray_takes_metrics():
    """With --ray the driver serves the endpoint (tensorcom.ray's metrics=; tests/adapters/test_ray.py)."""
    from tensorcom.adapters import ray

    plan = plan_of(["m:f", "zsplit://127.0.0.1:7880", "--ray", "2", "--metrics", ":0"])
    assert plan.serve.func is ray.serve and plan.options["metrics"] == ":0"


@pytest.mark.parametrize("parser,argv,workers", [
    (serve.build_parser, ["m:f", "zpush://127.0.0.1:7880"], "workers"),
    (serve_imagenet.dir_parser, ["zpush://127.0.0.1:7880"], "parallel"),
])
def test_no_timing_reaches_tensorcom_serve(parser, argv, workers):
    """--no-timing: timing=False for tensorcom.serve (its effect: tests/pipeline/test_stage_times_serve.py);
    without it, tensorcom.serve's default (on unless $TENSORCOM_TIMING=0); Ray actors time nothing."""
    assert plan_of([*argv, "--no-timing"], parser, workers).options["timing"] is False
    assert "timing" not in plan_of(argv, parser, workers).options
    assert "timing" not in plan_of(["m:f", "zsplit://127.0.0.1:7880", "--ray", "2", "--no-timing"]).options
