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

from tensorcom.transport.ends.attached import url_of
from tensorcom.transport.ends.curve import SocketSecurity
from tensorcom.transport.ends.intake import EPOCH_END, Intake
from tensorcom.transport.ends.plain_receiver import PlainReceiver
from tensorcom.transport.ends.plain_sender import PlainSender
from tensorcom.transport.ends.sharing import JoinerEnd, SharingServerEnd

__all__ = ["EPOCH_END", "Intake", "JoinerEnd", "PlainReceiver", "PlainSender", "SharingServerEnd",
           "SocketSecurity", "url_of"]
