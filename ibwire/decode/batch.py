"""Decoding a batch of packets into `RECORD` rows: numpy sets the per-record times and lengths, the
compiled loop (`_native.decode`, native/decode.c) reads every header of every packet.

The protocol facts the compiled loop needs come from here, so they keep one source: extended-header
offsets per opcode from dissectors.opcodes, the VCRC table from dissectors.crc, the record layout from
records.RECORD (each field's byte offset, checked against the types the C code writes).
"""

import numpy as np

from dissectors.crc import vcrc
from dissectors.decisions import may_carry_mad
from dissectors.numbers import ETHERTYPE_ROCE_V1, LINKTYPE_ERF, MAD_HEADER_LEN, MANAGEMENT_QPS, ROCE_V2_PORT
from dissectors.opcodes import HEADER_LEN, OPCODES
from ibwire.decode import _native
from ibwire.decode import records as R
from ibwire.decode.columns import STARTS, Columns
from ibwire.files.formats import erf_view
from ibwire.files.walk import Positions


def _opcode_tables():
    """Per-opcode offset (after the 12-byte BTH) of each extended header the records hold, -1 when
    absent; total extended-header length; bit 0: the opcode is defined, bit 1: a payload (and so pad
    bytes) may follow its headers (undefined opcodes: their bytes count as payload); bit 2: a SEND First or
    Only, whose payload may be IPoIB; bit 3: its payload is a MAD when either QP is a management QP."""
    off = np.full((len(_native.EXT_HEADERS), 256), -1, np.int16)
    total = np.zeros(256, np.int16)
    known = np.full(256, 2, np.uint8)
    for code, op in OPCODES.items():
        o = 0
        for h in op.headers:
            if h in _native.EXT_HEADERS:
                off[_native.EXT_HEADERS.index(h), code] = o
            o += HEADER_LEN[h]
        total[code] = o
        known[code] = 1 | (2 if op.payload else 0) | (4 if op.op == "send" and op.seg in ("first", "only") else 0)
    known |= np.array([8 if may_carry_mad(code) else 0 for code in range(256)], np.uint8)
    return off, total, known


def _field_offsets() -> np.ndarray:
    """Byte offset in a RECORD of each field the compiled decoder writes; the types must agree."""
    out = []
    for name, typ in _native.FIELDS:
        dt, off = R.RECORD.fields[name][:2]
        if dt.str.lstrip("<>|=") != typ:
            raise ImportError(f"ibwire.decode._native writes {name} as {typ} but RECORD has {dt.str}; rebuild it")
        out.append(off)
    return np.array(out, np.int64)


def _check_codes():
    ours = (
        {k: i for i, k in enumerate(R.LINK_KINDS)},
        {k: i for i, k in enumerate(R.CRC_STATUS)},
        {k: getattr(R, k) for k in _native.FLAGS},
    )
    if ours != (_native.LINK_KINDS, _native.CRC_STATUS, _native.FLAGS):
        raise ImportError("ibwire.decode._native disagrees with ibwire.decode.records on codes; rebuild it")


# VCRC byte table (reflected CRC-16, init/xorout 0xFFFF), recovered from dissectors.crc.vcrc:
# vcrc(b) = 0xFF ^ T[0xFF ^ b] ^ 0xFFFF, so T[x] = vcrc(x ^ 0xFF) ^ 0xFF00.
VCRC_TABLE = np.array([vcrc(bytes([x ^ 0xFF])) ^ 0xFF00 for x in range(256)], dtype=np.uint16)
EXT_OFF, EXT_LEN, KNOWN = _opcode_tables()
MAD_QP_MAX = max(MANAGEMENT_QPS)  # the compiled loop tests qp <= MAD_QP_MAX
if MANAGEMENT_QPS != tuple(range(MAD_QP_MAX + 1)):
    raise ImportError("dissectors.decisions.MANAGEMENT_QPS must be 0..n for the compiled decoder")
FIELD_OFF = _field_offsets()
RECORD_STEP = np.full(len(FIELD_OFF), R.RECORD.itemsize, np.int64)  # records one after another
# Columns (decode.columns): each field of the compiled decoder's at capacity * start + row * size.
COLUMN_STEP = np.array([R.RECORD.fields[name][0].itemsize for name, _ in _native.FIELDS], np.int64)
COLUMN_START = np.array([STARTS[name] for name, _ in _native.FIELDS], np.int64)
_check_codes()


def decode_batch(buf: np.ndarray, pos: Positions, icrc: bool = True, out: np.ndarray = None) -> np.ndarray:
    """Records for the packets at `pos` in `buf`; with `icrc`, ICRC and VCRC are verified.  `out`: a
    contiguous RECORD array of at least that many rows to decode into (its first rows are returned)."""
    n = len(pos.data)
    if out is None:
        rec = np.zeros(n, R.RECORD)
    else:
        out.view(np.uint8)[: n * R.RECORD.itemsize] = 0  # the compiled decoder writes into zeroed records
        rec = out[:n]
    rec["frame"], rec["time"], rec["caplen"], rec["len"] = pos.frame, pos.time, pos.caplen, pos.wirelen
    if pos.ns is not None:
        rec["time_ns"] = pos.ns
    rec["linktype"] = pos.linktype
    if n:
        _decode(buf, pos, icrc, FIELD_OFF, RECORD_STEP, rec)
        as_tshark_counts(buf, pos, rec)
    return rec


def as_tshark_counts(buf: np.ndarray, pos: Positions, out) -> None:
    """ERF records' lengths without the ERF header and their times from it, as tshark counts them
    (ibwire.files.formats.erf_view); `out` holds one row per position."""
    erf = np.flatnonzero(np.asarray(pos.linktype) == LINKTYPE_ERF)
    if not len(erf):
        return
    hdr, ns = erf_view(buf, pos.data[erf], pos.caplen[erf])
    for col in ("caplen", "len"):
        out[col][erf] = out[col][erf] - np.minimum(hdr, out[col][erf])
    has = ns >= 0
    out["time_ns"][erf[has]] = ns[has]
    out["time"][erf[has]] = ns[has] / 1e9


def decode_columns(buf: np.ndarray, pos: Positions, cols: Columns, icrc: bool = True) -> None:
    """The packets at `pos` in `buf` decoded into the next rows of the (zero-filled) block `cols`."""
    n, at = len(pos.data), cols.n
    if at + n > cols.capacity:
        raise ValueError(f"{n} more rows do not fit in a block of {cols.capacity} holding {at}")
    if n:
        _decode(buf, pos, icrc, cols.capacity * COLUMN_START + at * COLUMN_STEP, COLUMN_STEP, cols.buf)
    cols.n = at + n
    for field, v in (
        ("frame", pos.frame),
        ("time", pos.time),
        ("caplen", pos.caplen),
        ("len", pos.wirelen),
        ("time_ns", pos.ns),
        ("linktype", pos.linktype),
    ):
        if v is not None:
            cols[field][at:] = v
    as_tshark_counts(buf, pos, {k: cols[k][at:] for k in ("caplen", "len", "time_ns", "time")})


def _decode(buf, pos: Positions, icrc: bool, field_off: np.ndarray, field_step: np.ndarray, out) -> None:
    def i64(a):
        return np.ascontiguousarray(a, np.int64)

    _native.decode(
        buf,
        data=i64(pos.data),
        caplen=i64(pos.caplen),
        wirelen=i64(pos.wirelen),
        linktype=i64(pos.linktype),
        ext_off=EXT_OFF,
        ext_len=EXT_LEN,
        known=KNOWN,
        vtable=VCRC_TABLE,
        field_off=field_off,
        field_step=field_step,
        roce2_port=ROCE_V2_PORT,
        roce1_ethertype=ETHERTYPE_ROCE_V1,
        mad_qp_max=MAD_QP_MAX,
        mad_header_len=MAD_HEADER_LEN,
        icrc=icrc,
        out=out,
    )
