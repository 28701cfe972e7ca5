"""ibsim's UDP messages and the native InfiniBand packet each MAD becomes.

ibsim in remote mode (`ibsim -r`, linux-rdma/ibsim) listens on UDP port P for control messages
(`struct sim_ctl`, 80 bytes: magic 0xdeadbeef, client id, type, length, 64 data bytes) and on P+1+id for
client `id`'s MADs (`struct sim_request`, 288 bytes, include/ibsim.h):

    offset 0  dlid   u32 holding a network-order u16 (umad addr.lid copied as is)
    offset 4  slid   same; 0 means "the sender's LID", filled in by ibsim (sim_mad.c decode_sim_MAD)
    offset 8  dqp    u32, network order
    offset 12 sqp    u32, network order
    offset 16 status u32, network order; 110 (ETIMEDOUT) when ibsim bounces an undeliverable MAD
    offset 24 length u64, big-endian: MAD bytes used
    offset 32 mad    256 bytes

The LID fields are read as big-endian u16 from their first two bytes, which is what a little-endian host
(every host ibsim-utils ships for but s390x/ppc64) puts there.

Each MAD is written as a UD SEND Only packet (IBA Vol 1 §9.2): LRH (§7.7; VL 15 for subnet management,
LNH 2 = BTH follows), BTH, DETH (Q_Key 0 towards QP0, the well-known 0x80010000 GSI Q_Key otherwise,
§13.5.3), the 256-byte MAD, then ICRC and VCRC from `dissectors.crc`.
"""

import struct
from typing import NamedTuple, Optional

from dissectors.crc import icrc_ib, vcrc
from dissectors.numbers import DEFAULT_PKEY, GSI_QKEY
from dissectors.opcodes import OPCODES

SIM_REQUEST_LEN = 288
SIM_CTL_LEN = 80
SIM_MAGIC = 0xDEADBEEF
SIM_CTL_GET_PORT = 3
SIM_CTL_GET_PORTINFO = 8
IBSIM_MAX_CLIENTS = 10
IBSIM_DEFAULT_SERVER_PORT = 7070

MAD_LEN = 256
UD_SEND_ONLY = next(o.code for o in OPCODES.values() if o.transport == "UD" and o.name == "SEND Only")
_PKTLEN_WORDS = (8 + 12 + 8 + MAD_LEN + 4) // 4  # LRH PktLen counts LRH..ICRC in 4-byte words (§7.7.8)
_SMP_CLASSES = (0x01, 0x81)


class SimRequest(NamedTuple):
    dlid: int
    slid: int
    dqp: int
    sqp: int
    status: int
    length: int
    mad: bytes

    @property
    def mgmt_class(self) -> int:
        return self.mad[1]

    @property
    def is_response(self) -> bool:
        return bool(self.mad[3] & 0x80)

    @property
    def directed_route(self) -> bool:
        return self.mad[1] == 0x81


def parse_sim_request(data: bytes) -> Optional[SimRequest]:
    """Decode one `struct sim_request`; None when the datagram has another size."""
    if len(data) != SIM_REQUEST_LEN:
        return None
    dlid = struct.unpack_from(">H", data, 0)[0]
    slid = struct.unpack_from(">H", data, 4)[0]
    dqp, sqp, status = struct.unpack_from(">III", data, 8)
    length = struct.unpack_from(">Q", data, 24)[0]
    used = min(length, MAD_LEN) if length else MAD_LEN
    mad = data[32 : 32 + used]
    return SimRequest(dlid, slid, dqp & 0xFFFFFF, sqp & 0xFFFFFF, status, length, mad.ljust(MAD_LEN, b"\0"))


def parse_ctl_port_lid(data: bytes):
    """(client id, LID) from a control reply that carries the client's port LID, else None."""
    if len(data) != SIM_CTL_LEN:
        return None
    magic, client, ctype, _ = struct.unpack_from("<IIII", data, 0)
    if magic != SIM_MAGIC:
        return None
    if ctype == SIM_CTL_GET_PORTINFO:  # data is PortInfo: LID at byte 16 (§14.2.5.6)
        return client, struct.unpack_from(">H", data, 16 + 16)[0]
    if ctype == SIM_CTL_GET_PORT:  # struct sim_port {u16 lid; u8 state}, host order
        return client, struct.unpack_from("<H", data, 16)[0]
    return None


def with_client_tid(mad: bytes, client: int) -> bytes:
    """The MAD as ibsim passes it on: requests carry the client id in TID bits 63-48 (update_trid)."""
    if mad[3] & 0x80:
        return mad
    return mad[:8] + struct.pack(">H", client) + mad[10:]


def ib_packet(
    dlid: int, slid: int, dqp: int, sqp: int, mad: bytes, psn: int = 0, pkey: int = DEFAULT_PKEY, sl: int = 0
) -> bytes:
    """LRH + BTH + DETH + MAD + ICRC + VCRC of one MAD sent as a UD SEND Only."""
    vl = 15 if mad[1] in _SMP_CLASSES else 0
    lrh = struct.pack(">BBHHH", vl << 4, (sl << 4) | 0x2, dlid, _PKTLEN_WORDS, slid)
    bth = struct.pack(">BBHII", UD_SEND_ONLY, 0, pkey, dqp & 0xFFFFFF, psn & 0xFFFFFF)
    deth = struct.pack(">II", 0 if dqp == 0 else GSI_QKEY, sqp & 0xFFFFFF)
    pkt = lrh + bth + deth + mad[:MAD_LEN].ljust(MAD_LEN, b"\0")
    pkt += struct.pack("<I", icrc_ib(pkt))
    return pkt + struct.pack("<H", vcrc(pkt))
