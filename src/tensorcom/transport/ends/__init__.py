"""The endpoints a `Connection` is a façade over: one object per scheme family, each owning its
socket(s) and its pure session core, built from explicit arguments (tensorcom.transport.options).

    PlainSender        zpush, zrpush, zpub, zrpub: a socket and its sessions (`_outbound.Outbound`)
    PlainReceiver      zpull, zrpull, zsub, zrsub: a socket, its sessions (`_inbound.Inbound`), the
                       epoch book (`epochs.EpochBook`) and the sequence tracker
    SharingServerEnd   zshare, zsplit: a ShareServer thread fed by a PlainSender over inproc
    JoinerEnd          zjoin: a Joiner
    Intake             what every receiving end does with a batch (statistics, counts, resume record,
                       transforms and converters)
    SocketSecurity     CURVE for an end's sockets

Receiving ends' `next_batch()` returns a batch or `EPOCH_END`; every end has `close()`, `url`,
`endpoints`, `socket`.
"""

from __future__ import annotations

from tensorcom.lazy import lazy_names

# name -> the module that defines it, imported on first use (PEP 562), so that importing one end
# imports no other (the sharing ends import the sharing protocol, asyncio with it, when they open)
_EXPORTS: dict[str, str] = {
    "EPOCH_END": "tensorcom.transport.ends.intake",
    "Intake": "tensorcom.transport.ends.intake",
    "JoinerEnd": "tensorcom.transport.ends.sharing",
    "PlainReceiver": "tensorcom.transport.ends.plain_receiver",
    "PlainSender": "tensorcom.transport.ends.plain_sender",
    "SharingServerEnd": "tensorcom.transport.ends.sharing",
    "SocketSecurity": "tensorcom.transport.ends.curve",
    "url_of": "tensorcom.transport.ends.attached",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
