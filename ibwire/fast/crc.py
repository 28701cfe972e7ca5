"""ICRC and VCRC of a whole batch: numpy says where each packet's headers are, one compiled loop
(`_native`) masks the variant fields and computes every packet's CRC (zlib's CRC-32 for the ICRC).

The masking rules are those of dissectors/crc.py (IBA §7.8.1, RoCE Annex A16/A17); the per-packet
functions there stay the reference and the tests compare against them.
"""
import numpy as np

from dissectors.crc import vcrc

from . import _native
from .records import IB, IBGRH, ROCE1, ROCE2V4, ROCE2V6

# The byte-wise table of the VCRC (reflected CRC-16, init/xorout 0xFFFF), recovered from dissectors.crc.vcrc:
# vcrc(b) = 0xFF ^ T[0xFF ^ b] ^ 0xFFFF, so T[x] = vcrc(x ^ 0xFF) ^ 0xFF00.
_T16A = np.array([vcrc(bytes([x ^ 0xFF])) ^ 0xFF00 for x in range(256)], dtype=np.uint16)


def icrc_batch(buf: np.ndarray, kind, lrh, l3, udp, bth, end, rows) -> np.ndarray:
    """Computed ICRCs (uint32) for `rows` (indices into the batch arrays); offsets are absolute in `buf`.

    Which headers carry variant fields, by link kind: local IB the LRH's VL; routed IB the whole LRH
    and the GRH; RoCE a pseudo-LRH of ones and the GRH (v1) or IPv6/IPv4 and UDP headers (v2); all the BTH."""
    out = np.zeros(len(rows), dtype=np.uint32)
    if not len(rows):
        return out
    kind, lrh, l3, udp, bth, end = (np.asarray(a[rows], np.int64) for a in (kind, lrh, l3, udp, bth, end))
    native = (kind == IB) | (kind == IBGRH)
    start = np.where(native, lrh, l3 - 8)
    none = np.full(len(rows), -1, np.int64)
    v2 = (kind == ROCE2V4) | (kind == ROCE2V6)
    _native.icrc_spans(buf, start, end,
                       np.where(kind == IB, lrh, none),                               # VL only
                       np.where(native & (kind != IBGRH), none, start),                # 8 bytes of ones
                       np.where((kind == IBGRH) | (kind == ROCE1) | (kind == ROCE2V6), l3, none),
                       np.where(kind == ROCE2V4, l3, none),
                       np.where(v2, udp, none), bth, out)
    return out


def vcrc_batch(buf: np.ndarray, lrh: np.ndarray, end: np.ndarray) -> np.ndarray:
    """VCRC (CRC-16, poly 0x100B reflected) of buf[lrh:end] for each row."""
    out = np.zeros(len(lrh), dtype=np.uint16)
    _native.crc16_spans(buf, _T16A, np.ascontiguousarray(lrh, np.int64), np.ascontiguousarray(end, np.int64), out)
    return out
