"""What a payload holds: a MAD in a UD datagram to or from QP0/QP1 (the rule is dissectors.decisions'), or
IPoIB (RFC 4391) behind its 4-byte header, in UD (datagram mode) or in the first SEND of RC/UC (connected
mode)."""

import struct

from dissectors.decisions import carries_mad
from dissectors.encap import ETHERTYPES, IPoIB
from dissectors.ib import BTH, DETH, _payload_hooks
from dissectors.numbers import ETHERTYPE_IPV4, ETHERTYPE_IPV6
from dissectors.opcodes import lookup


def _deth_of(layer):
    while layer is not None and not isinstance(layer, BTH):
        if isinstance(layer, DETH):
            return layer
        layer = layer.underlayer
    return None


def _plausible_ip(etype: int, payload: bytes) -> bool:
    inner = payload[4:]
    if etype == ETHERTYPE_IPV4:
        return len(inner) >= 20 and inner[0] >> 4 == 4 and (inner[0] & 0x0F) >= 5
    if etype == ETHERTYPE_IPV6:
        return len(inner) >= 40 and inner[0] >> 4 == 6
    return len(inner) >= 8 and inner[:2] == b"\x00\x20" and inner[2:4] == b"\x08\x00"  # ARP, IB hw type 32


def payload_class(bth, last, payload: bytes):
    op = lookup(bth.opcode)
    deth = _deth_of(last)
    if carries_mad(bth.opcode, bth.destqp, None if deth is None else deth.srcqp):
        try:
            from dissectors.mad import MAD
        except ImportError:  # the MAD layers are optional for transport decoding
            return None
        return MAD
    if op.op != "send" or op.seg not in ("only", "first") or len(payload) < 4:
        return None
    etype, reserved = struct.unpack_from(">HH", payload)
    if etype in ETHERTYPES and reserved == 0 and _plausible_ip(etype, payload):
        return IPoIB
    return None


_payload_hooks.append(payload_class)
