"""Invariant and variant CRCs of InfiniBand packets (IBA Vol 1 §7.8, RoCE Annex A16/A17).

ICRC is CRC-32 (the Ethernet polynomial) over the packet with every field that may change hop by hop
replaced by ones; it is stored least-significant byte first.  Variant fields are:

* native IB without GRH: LRH.VL and BTH byte 4 (FECN, BECN, reserved);
* native IB with GRH: the whole LRH, GRH traffic class, flow label and hop limit, BTH byte 4;
* RoCEv1: an 8-byte pseudo-LRH of ones, then as native IB with GRH;
* RoCEv2: the pseudo-LRH, IPv4 TOS/TTL/checksum or IPv6 traffic class/flow label/hop limit, UDP checksum,
  BTH byte 4.

VCRC is CRC-16 (polynomial 0x100B, reflected, initial and final value 0xFFFF) over the whole native IB
packet including its ICRC, stored least-significant byte first.  Functions take the bytes the CRC
covers (without the CRC itself) and return integers, so readers, layers and the generator share them.
"""

import sys
import zlib

_PSEUDO_LRH = b"\xff" * 8
_ONES4 = b"\xff\xff\xff\xff"


def _mask_grh(grh: bytearray, at: int) -> None:
    grh[at] |= 0x0F  # low nibble of version/tclass byte: tclass high bits
    grh[at + 1 : at + 4] = b"\xff\xff\xff"  # tclass low bits and the 20-bit flow label
    grh[at + 7] = 0xFF  # hop limit


def icrc_ib(packet) -> int:
    """ICRC of a native IB packet given from the first LRH byte up to (not including) the ICRC."""
    mv = memoryview(packet)
    has_grh = (mv[1] & 0x03) == 0x03
    if has_grh:
        head = bytearray(_PSEUDO_LRH) + bytearray(mv[8:48]) + bytearray(mv[48:60])
        _mask_grh(head, 8)
        head[52] = 0xFF
        return zlib.crc32(mv[60:], zlib.crc32(head)) & 0xFFFFFFFF
    head = bytearray(mv[:20])
    head[0] |= 0xF0
    head[12] = 0xFF
    return zlib.crc32(mv[20:], zlib.crc32(head)) & 0xFFFFFFFF


def icrc_roce1(packet) -> int:
    """ICRC of a RoCEv1 packet given from the first GRH byte up to the ICRC."""
    mv = memoryview(packet)
    head = bytearray(_PSEUDO_LRH) + bytearray(mv[:52])
    _mask_grh(head, 8)
    head[52] = 0xFF
    return zlib.crc32(mv[52:], zlib.crc32(head)) & 0xFFFFFFFF


def icrc_roce2(packet) -> int:
    """ICRC of a RoCEv2 packet given from the first IP byte up to the ICRC (IPv4 or IPv6)."""
    mv = memoryview(packet)
    if mv[0] >> 4 == 6:
        n = 40 + 8 + 12
        head = bytearray(_PSEUDO_LRH) + bytearray(mv[:n])
        _mask_grh(head, 8)
        head[8 + 46 : 8 + 48] = b"\xff\xff"  # UDP checksum
    else:
        ihl = (mv[0] & 0x0F) * 4
        n = ihl + 8 + 12
        head = bytearray(_PSEUDO_LRH) + bytearray(mv[:n])
        head[9] = 0xFF  # TOS (DSCP and ECN)
        head[16] = 0xFF  # TTL
        head[18:20] = b"\xff\xff"  # header checksum
        head[8 + ihl + 6 : 8 + ihl + 8] = b"\xff\xff"
    head[-8] = 0xFF  # BTH byte 4
    return zlib.crc32(mv[n:], zlib.crc32(head)) & 0xFFFFFFFF


def _crc16_byte_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD008 if crc & 1 else crc >> 1  # 0xD008 is 0x100B reflected
        table.append(crc)
    return table


_T8 = _crc16_byte_table()
_T16 = None


def _word_table():
    """State after feeding 16 zero bits from each 16-bit state: the reflected register is exactly one
    word wide, so one look-up per little-endian word replaces two byte steps."""
    global _T16
    if _T16 is None:
        t8 = _T8
        _T16 = [t8[(t8[x & 0xFF] ^ (x >> 8)) & 0xFF] ^ (t8[x & 0xFF] >> 8) for x in range(65536)]
    return _T16


def vcrc(packet) -> int:
    """VCRC of a native IB packet given from the first LRH byte up to (not including) the VCRC."""
    data = bytes(packet)
    crc = 0xFFFF
    if len(data) >= 64 and sys.byteorder == "little":
        t16 = _word_table()
        even = len(data) & ~1
        for word in memoryview(data[:even]).cast("H"):
            crc = t16[crc ^ word]
        data = data[even:]
    t8 = _T8
    for b in data:
        crc = (crc >> 8) ^ t8[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFF
