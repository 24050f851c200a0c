"""Fixtures of the fault tests: `make_net` (network namespaces, faults, processes; all removed at teardown),
skipped with the harness's reason where it cannot run (not root, no `ip`/`nft`, namespaces refused)."""

from __future__ import annotations

import pytest

from faults.netns import Net, sweep, unavailable


@pytest.fixture(scope="session")
def netns_available() -> None:
    """Skip unless the harness can run; once per session, remove what dead harness processes left."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    sweep()


@pytest.fixture
def make_net(netns_available):
    """Call make_net(hosts, links=None) for a started Net; every Net made is closed at teardown."""
    made: list[Net] = []

    def make(hosts: list[str], links: list[tuple[str, str]] | None = None) -> Net:
        net = Net(hosts, links)
        made.append(net)
        net.start()
        return net

    yield make
    for net in made:
        net.close()
