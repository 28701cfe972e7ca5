"""Typed Arrow tables of per-packet records and of the conversation table (pyarrow).

Field names are the display-filter keys with dots turned into underscores (`bth_p_key`).  Every column
has one type whatever the capture holds, so a table with zero rows has the full schema: integers for
QPNs, P_Keys and LIDs, `frame_time` as timestamp[ns, UTC], addresses and MACs as dictionary-encoded text
(as tshark and `decode` show them), opcodes and CRC statuses as names; a header the packet does not carry
(LRH on RoCE, Ethernet on native InfiniBand, RETH on a SEND) is null, not zero.
"""
from typing import List

import numpy as np
import pyarrow as pa

from dissectors.opcodes import OPCODES, lookup
from ..fast import records as R
from ..fast.columns import Columns, from_records
from .flows import MESSAGE_KINDS
from .hashing import group_rows

_OPNAMES = [lookup(c).full_name for c in range(256)]
_TIME = pa.timestamp("ns", tz="UTC")
_BTH_FIELDS = ("opcode", "se", "m", "padcnt", "tver", "p_key", "fecn", "becn", "destqp", "a", "psn", "paylen")
_MAD_FIELDS = ("mad_class", "mad_classver", "mad_method", "mad_status", "mad_attrid", "mad_attrmod", "mad_tid")
_LRH_FIELDS = ("slid", "dlid", "sl", "vl")
# Record field -> the extended header (opcodes.py names) that carries it.
_EXT_OF = {"reth_va": "reth", "reth_r_key": "reth", "reth_dmalen": "reth", "aeth_syndrome": "aeth",
           "aeth_msn": "aeth", "deth_q_key": "deth", "deth_srcqp": "deth", "atomic_va": "atomiceth",
           "atomic_r_key": "atomiceth", "atomic_swapdt": "atomiceth", "atomic_cmpdt": "atomiceth",
           "atomicack": "atomicacketh", "immdt": "immdt", "ieth": "ieth", "xrcsrq": "xrceth"}
_EXT = sorted(set(_EXT_OF.values()))
# Opcode -> one bit per extended header of _EXT that it carries (one lookup per packet finds them all).
_EXT_BITS = np.array([sum(1 << k for k, h in enumerate(_EXT) if c in OPCODES and h in OPCODES[c].headers)
                      for c in range(256)], np.uint16)
_ETH_LINKS = np.array([k in (R.ROCE1, R.ROCE2V4, R.ROCE2V6) for k in range(256)])
_LRH_LINKS = np.array([k in (R.IB, R.IBGRH) for k in range(256)])
_UDP_LINKS = np.array([k in (R.ROCE2V4, R.ROCE2V6) for k in range(256)])
_SKIP = ("time", "time_ns")   # the record's float and integer times become the one frame_time column
_TEXT = {"src": R.addr_text, "dst": R.addr_text, "eth_src": R.mac_text, "eth_dst": R.mac_text}   # bytes -> text
_DICT_STR = pa.dictionary(pa.int32(), pa.string())


def _name(field: str) -> str:
    return R.FIELD_KEYS.get(field, field).replace(".", "_")


def _nonzero(col: np.ndarray) -> np.ndarray:
    """Rows of a fixed-size bytes column (6 or 16 bytes) that hold anything but zero bytes (the words of
    each row or-ed column by column: a reduce along a short axis is many times slower)."""
    col = np.ascontiguousarray(col)
    words = col.view(np.uint16 if col.dtype.itemsize % 8 else np.uint64).reshape(len(col), -1)
    acc = words[:, 0].copy()
    for k in range(1, words.shape[1]):
        acc |= words[:, k]
    return acc != 0


def _present(rec) -> dict:
    """Field -> bool array of the rows whose packet carries that field (absent fields are null); `rec`:
    records or their columns (fast.columns)."""
    fl, link, op = rec["flags"], rec["link"], rec["opcode"]
    bth = (fl & R.F_BTH) > 0
    mad = (fl & R.F_MAD) > 0
    cm = mad & (rec["mad_class"] == 0x07)
    attr = rec["mad_attrid"]
    addr = ((fl & R.F_GRH) > 0) | _nonzero(rec["src"]) | _nonzero(rec["dst"])
    eth = _ETH_LINKS[link] | _nonzero(rec["eth_src"]) | _nonzero(rec["eth_dst"])
    out = {"eth_src": eth, "eth_dst": eth, "src": addr, "dst": addr, "ecn": addr, "vlan": rec["vlan"] >= 0,
           "udp_src": _UDP_LINKS[link] | (rec["udp_src"] > 0) | (rec["udp_dst"] > 0),
           "cm_comm_id": cm, "cm_remote_comm_id": cm & (attr != 0x10), "cm_qpn": cm & ((attr == 0x10) | (attr == 0x13))}
    out["udp_dst"] = out["udp_src"]
    out.update({f: _LRH_LINKS[link] for f in _LRH_FIELDS})
    out.update({f: bth for f in _BTH_FIELDS})
    out.update({f: mad for f in _MAD_FIELDS})
    bits = np.where(bth, _EXT_BITS[op], 0)
    ext = {h: (bits & (1 << k)) > 0 for k, h in enumerate(_EXT)}
    out.update({f: ext[h] for f, h in _EXT_OF.items()})
    return out


def _arrow_type(field: str) -> pa.DataType:
    dt = R.RECORD[field]
    if field in _TEXT:
        return _DICT_STR
    if field in ("icrc", "vcrc", "link"):
        return pa.dictionary(pa.int8(), pa.string())
    if field == "vlan":
        return pa.uint16()
    return pa.from_numpy_dtype(dt)


# Fields some packets lack (null there): those `_present` has a rule for, and the CRC statuses.  Every other
# column is declared non-nullable, which Parquet stores without definition levels.
_OPTIONAL = set(_present(from_records(np.zeros(1, R.RECORD)).columns())) | {"icrc", "vcrc"}


def record_schema() -> pa.Schema:
    """The export's columns and types (the same for every capture, with or without packets)."""
    fields = [pa.field("frame_time", _TIME, nullable=False)]
    fields += [pa.field(_name(f), _arrow_type(f), nullable=f in _OPTIONAL) for f in R.RECORD.names if f not in _SKIP]
    fields += [pa.field("operation", _DICT_STR)]
    return pa.schema(fields)


def _strings(words) -> pa.Array:
    """A string array built from its buffers (pa.array on Python objects imports pandas when present:
    +50 MB resident)."""
    data = [w.encode() for w in words]
    offsets = np.zeros(len(data) + 1, np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


_SEEN: dict = {}      # address or MAC bytes -> text (a capture has few endpoints; ipaddress is slow)


def _text(field: str, w: bytes) -> str:
    t = _SEEN.get(w)
    if t is None:
        if len(_SEEN) > 1 << 16:
            _SEEN.clear()
        t = _SEEN[w] = _TEXT[field](w)
    return t


_TEXT_KEY = np.dtype([(f, R.RECORD[f]) for f in _TEXT])


def _text_dicts(cols_of: dict, n: int) -> dict:
    """Field -> (distinct values in text, each row's index among them) of the address and MAC columns: one
    grouping of the rows by all four (a batch has few endpoint pairs), then each column's distinct values
    among the groups' first rows."""
    keys = np.empty(n, _TEXT_KEY)
    for f in _TEXT:
        keys[f] = cols_of[f]
    _, first, inv = group_rows(keys, tuple(_TEXT))
    out = {}
    for f in _TEXT:
        heads = keys[f][first]
        _, distinct, pick = group_rows(heads.view(np.dtype([("k", heads.dtype)])), ("k",))
        out[f] = ([_text(f, bytes(heads[i])) for i in distinct.tolist()], pick.astype(np.int32)[inv])
    return out


SCHEMA = record_schema()
_NAMES = _strings(_OPNAMES)
_LINK_NAMES, _CRC_NAMES = _strings(R.LINK_KINDS), _strings(R.CRC_STATUS)


def record_table(rec: np.ndarray) -> pa.Table:
    """One row per record with the columns of `record_schema()`."""
    return column_table(from_records(rec))


def column_table(cols: Columns) -> pa.Table:
    """One row per row of the block `cols` (fast.columns), with the columns of `record_schema()`; the
    table's number columns share the block's memory."""
    n = len(cols)
    cols_of = cols.columns()
    present = _present(cols_of)
    bitmaps: dict = {}

    def bitmap(valid):
        """Arrow validity bitmap of a bool array (None when every row is valid); shared arrays pack once."""
        if valid is None:
            return None
        key = id(valid)
        if key not in bitmaps:
            bitmaps[key] = (None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little")), valid)
        return bitmaps[key][0]

    def column(typ, data, valid=None):
        return pa.Array.from_buffers(typ, n, [bitmap(valid), pa.py_buffer(np.ascontiguousarray(data))], null_count=-1)

    texts = _text_dicts(cols_of, n)
    out = [column(_TIME, cols_of["time_ns"])]
    for f in R.RECORD.names:
        if f in _SKIP:
            continue
        c = cols_of[f]
        typ = SCHEMA.field(_name(f)).type
        if f in _TEXT:
            words, idx = texts[f]
            idx = pa.Array.from_buffers(pa.int32(), n, [bitmap(present[f]), pa.py_buffer(idx)], null_count=-1)
            out.append(pa.DictionaryArray.from_arrays(idx, _strings(words)))
        elif f in ("icrc", "vcrc", "link"):
            idx = column(pa.int8(), c.view(np.int8), None if f == "link" else c != R.ABSENT)
            out.append(pa.DictionaryArray.from_arrays(idx, _LINK_NAMES if f == "link" else _CRC_NAMES))
        elif f == "vlan":
            out.append(column(typ, c.astype(np.uint16), present[f]))
        else:
            out.append(column(typ, c, present.get(f)))
    out.append(pa.DictionaryArray.from_arrays(column(pa.int32(), cols_of["opcode"].astype(np.int32), present["opcode"]),
                                              _NAMES))
    return pa.Table.from_arrays(out, schema=SCHEMA)


# --- the conversation table -------------------------------------------------------------------------------

_COUNTS = pa.struct([pa.field(k, pa.int64()) for k in MESSAGE_KINDS])
_LATENCY = pa.struct([pa.field("n", pa.int64())] + [pa.field(k, pa.float64()) for k in ("p50", "p90", "p99", "max")])
FLOW_SCHEMA = pa.schema([
    ("conversation", pa.int32()), ("transport", pa.string()), ("a", pa.string()), ("b", pa.string()),
    ("qpn_a", pa.uint32()), ("qpn_b", pa.uint32()), ("p_key", pa.list_(pa.uint16())), ("paired_by", pa.string()),
    ("packets_a_to_b", pa.int64()), ("packets_b_to_a", pa.int64()), ("bytes_a_to_b", pa.int64()),
    ("bytes_b_to_a", pa.int64()), ("payload_bytes", pa.int64()), ("first_time", _TIME), ("duration_s", pa.float64()),
    ("goodput_bps", pa.float64()), ("messages", _COUNTS), ("message_bytes", _COUNTS),
    ("one_sided", pa.int64()), ("two_sided", pa.int64()),
    ("psn_gaps", pa.int64()), ("drops", pa.int64()), ("retransmissions", pa.int64()), ("out_of_order", pa.int64()),
    ("length_mismatch", pa.int64()), ("bad_icrc", pa.int64()),
    ("acks", pa.int64()), ("naks", pa.map_(pa.string(), pa.int64())), ("rnr_naks", pa.int64()),
    ("rnr_timer_ms", pa.map_(pa.float64(), pa.int64())), ("ack_coalescing", pa.float64()),
    ("max_outstanding", pa.int64()), ("reads_completed", pa.int64()), ("unmatched_read_responses", pa.int64()),
    ("unacknowledged_at_end", pa.int64()), ("read_latency_us", _LATENCY), ("ack_latency_us", _LATENCY),
    ("cnp_received_a", pa.int64()), ("cnp_received_b", pa.int64()), ("ecn_ce", pa.int64()),
])


def _typed_flow(r: dict) -> dict:
    """A conversation row (flows.analyse) in FLOW_SCHEMA's types."""
    out = dict(r)
    for k in ("qpn_a", "qpn_b"):
        out[k] = None if r.get(k) is None else int(r[k], 16)
    out["p_key"] = [int(p, 16) for p in r["p_key"].split(",") if p]
    out["first_time"] = r.get("first_time_ns")
    for k in ("messages", "message_bytes"):
        out[k] = {m: r[k].get(m, 0) for m in MESSAGE_KINDS}
    if r.get("naks") is not None:
        out["naks"] = list(r["naks"].items())
    if r.get("rnr_timer_ms") is not None:
        out["rnr_timer_ms"] = [(float(k), v) for k, v in r["rnr_timer_ms"].items()]
    return out


def flow_table(rows: List[dict]) -> pa.Table:
    """The conversation table with FLOW_SCHEMA's columns (also when there are no conversations)."""
    typed = [_typed_flow(r) for r in rows]
    return pa.Table.from_pylist([{k: t.get(k) for k in FLOW_SCHEMA.names} for t in typed], schema=FLOW_SCHEMA)
