"""`tensorcom.serve` to the sharing schemes: with `zshare://` or `zsplit://` URLs the serving process
runs the sharing server (`tensorcom.transport.sharing.Hub`) and its N workers push their portions to it, so
one pipeline feeds every consumer that joins (`zjoin://`).

    hub = open_hub(urls, min_consumers=2, sharing={"replay": 32}, make_pipeline=f)   # None for other schemes
    ... workers send to hub.worker_url ...
    finish_hub(hub, ends=epochs)         # waits until the consumers have everything; raises
                                         # TransportError naming what was not delivered
"""

from __future__ import annotations

from typing import Any

from tensorcom.urls import parse_all


def is_sharing(urls: Any) -> bool:
    """True when `urls` are sharing-server URLs (zshare / zsplit); ValueError for a mix with others."""
    endpoints = parse_all(urls)
    sharing = [e for e in endpoints if e.sharing]
    if sharing and len(sharing) != len(endpoints):
        raise ValueError(f"serve URLs are either all sharing (zshare, zsplit) or none: {[e.url for e in endpoints]}")
    for e in sharing:
        if not e.sends:
            raise ValueError(f"{e.url}: a server binds zshare:// or zsplit://; zjoin:// is the consumers' side")
    return bool(sharing)


def open_hub(urls: Any, *, min_consumers: int = 1, sharing: dict | None = None, curve: Any = None,
             make_pipeline: Any = None) -> Any:
    """The running Hub for sharing `urls`, or None for other schemes. `sharing`: further ShareServer
    options (replay, policy, liveness); `curve`: its CURVE keys (tensorcom.transport.security.Curve);
    `make_pipeline`: a picklable callable returning the served Pipeline, whose catch-up worker makes
    lacking batches again for restarted consumers (tensorcom.pipeline.catch_up)."""
    if not is_sharing(urls):
        if min_consumers != 1 or sharing:
            raise ValueError("min_consumers and sharing options need zshare:// or zsplit:// URLs")
        return None
    from tensorcom.transport.sharing.hub import Hub

    hub = Hub(urls, curve=curve, min_consumers=min_consumers, **(sharing or {}))
    if make_pipeline is not None:
        from tensorcom.pipeline.catch_up import attach_catch_up

        attach_catch_up(hub, make_pipeline)
    return hub


def finish_hub(hub: Any, ends: int | None) -> dict:
    """Let the hub's stream end after `ends` epochs and wait until every consumer has everything;
    returns its result, or raises TransportError when batches were not delivered."""
    from tensorcom.transport.sharing.server import check_delivered

    hub.finish(ends)
    result = hub.close()
    check_delivered(result, hub.server.url)
    return result
