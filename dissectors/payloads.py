"""What a datagram payload holds: a MAD on QP0/QP1 (IBA §13.4: management traffic is carried only by
QP0 and QP1, which is also how Wireshark recognises MADs) or IPoIB (RFC 4391) behind a 4-byte header."""
import struct

from .encap import ETHERTYPES, IPoIB
from .ib import BTH, DETH, _ud_payload_hooks


def _deth_of(layer):
    while layer is not None and not isinstance(layer, BTH):
        if isinstance(layer, DETH):
            return layer
        layer = layer.underlayer
    return None


def ud_payload(bth, last, payload: bytes):
    deth = _deth_of(last)
    if bth.destqp in (0, 1) or (deth is not None and deth.srcqp in (0, 1)):
        try:
            from .mad import MAD
        except ImportError:
            return None
        return MAD
    if len(payload) >= 4:
        etype, reserved = struct.unpack_from(">HH", payload)
        if etype in ETHERTYPES and reserved == 0:
            return IPoIB
    return None


_ud_payload_hooks.append(ud_payload)
