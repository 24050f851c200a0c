"""Fixtures of the adapter tests: `ray_instance`, one local Ray instance (2 CPUs, on 127.0.0.1) per pytest
process, shared by every test that starts Ray actors (tests/adapters/test_ray.py, test_ray_reconnect.py)
and shut down at the end of the session. Those tests carry `@pytest.mark.xdist_group("ray")`, so that
with `pytest -n 3 --dist loadgroup` one worker runs them all on one instance (starting one takes
about 5 s). Skipped where Ray is not installed."""

from __future__ import annotations

import pytest

@pytest.fixture(scope="session")
def ray_instance():
    """The ray module, initialised once for the session: ray.init(num_cpus=2) on 127.0.0.1."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield ray
    ray.shutdown()
