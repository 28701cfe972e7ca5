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

from dissectors.opcodes import lookup
from ibwire.analyze.flows import MESSAGE_KINDS
from ibwire.analyze.presence import TEXT, prepare, present
from ibwire.decode import records as R
from ibwire.decode.columns import Columns, from_records

_OPNAMES = [lookup(c).full_name for c in range(256)]
_TIME = pa.timestamp("ns", tz="UTC")
_SKIP = ("time", "time_ns")  # the record's float and integer times become the one frame_time column
_DICT_STR = pa.dictionary(pa.int32(), pa.string())


def _name(field: str) -> str:
    return (R.ANALYSIS[field][0] if field in R.ANALYSIS else R.FIELD_KEYS.get(field, field)).replace(".", "_")


def _arrow_type(field: str) -> pa.DataType:
    dt = R.RECORD[field]
    if field in TEXT:
        return _DICT_STR
    if field in ("icrc", "vcrc", "link") or field == "an_retry_cause":
        return pa.dictionary(pa.int8(), pa.string())
    kind = R.ANALYSIS.get(field, ("", ""))[1]
    if kind in ("flag", "span"):  # RC analysis: a flag is true or false, a wait a duration
        return pa.bool_() if kind == "flag" else pa.duration("ns")
    if field == "vlan":
        return pa.uint16()
    return pa.from_numpy_dtype(dt)


# Fields some packets lack (null there): those `presence.present` has a rule for, and the CRC statuses.  Every other
# column is declared non-nullable, which Parquet stores without definition levels.
_OPTIONAL = set(present(from_records(np.zeros(1, R.RECORD)).columns())) | {"icrc", "vcrc"}


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


SCHEMA = record_schema()
_NAMES = _strings(_OPNAMES)
_LINK_NAMES, _CRC_NAMES = _strings(R.LINK_KINDS), _strings(R.CRC_STATUS)
_CAUSE_NAMES = _strings(R.RETRY_CAUSES)


def record_table(rec: np.ndarray) -> pa.Table:
    """One row per record with the columns of `record_schema()`."""
    return column_table(from_records(rec))


def column_table(cols: Columns, prepared=None) -> pa.Table:
    """One row per row of the block `cols` (decode.columns), with the columns of `record_schema()`; the
    table's number columns share the block's memory.  `prepared`: `presence.prepare(cols)` when made
    already (on the thread that decoded the block)."""
    n = len(cols)
    cols_of = cols.columns()
    has, texts = prepared or prepare(cols)
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

    out = [column(_TIME, cols_of["time_ns"])]
    for f in R.RECORD.names:
        if f in _SKIP:
            continue
        c = cols_of[f]
        typ = SCHEMA.field(_name(f)).type
        if f in TEXT:
            words, idx = texts[f]
            idx = pa.Array.from_buffers(pa.int32(), n, [bitmap(has[f]), pa.py_buffer(idx)], null_count=-1)
            out.append(pa.DictionaryArray.from_arrays(idx, _strings(words)))
        elif f in ("icrc", "vcrc", "link"):
            idx = column(pa.int8(), c.view(np.int8), None if f == "link" else c != R.ABSENT)
            out.append(pa.DictionaryArray.from_arrays(idx, _LINK_NAMES if f == "link" else _CRC_NAMES))
        elif f == "vlan":
            out.append(column(typ, c.astype(np.uint16), has[f]))
        elif f == "an_retry_cause":
            out.append(pa.DictionaryArray.from_arrays(column(pa.int8(), c.view(np.int8), has[f]), _CAUSE_NAMES))
        elif typ == pa.bool_():
            out.append(pa.Array.from_buffers(typ, n, [None, pa.py_buffer(np.packbits(c != 0, bitorder="little"))]))
        else:
            out.append(column(typ, c, has.get(f)))
    out.append(
        pa.DictionaryArray.from_arrays(column(pa.int32(), cols_of["opcode"].astype(np.int32), has["opcode"]), _NAMES)
    )
    return pa.Table.from_arrays(out, schema=SCHEMA)


# --- the conversation table -------------------------------------------------------------------------------

_COUNTS = pa.struct([pa.field(k, pa.int64()) for k in MESSAGE_KINDS])
_LATENCY = pa.struct([pa.field("n", pa.int64())] + [pa.field(k, pa.float64()) for k in ("p50", "p90", "p99", "max")])
_RETRIES = pa.struct(
    [
        ("timeout_episodes", pa.int64()),
        ("nak_episodes", pa.int64()),
        ("rnr_episodes", pa.int64()),
        ("max_retries", pa.int64()),
        (
            "ack_timeout",
            pa.struct(
                [
                    ("wait_us_min", pa.float64()),
                    ("wait_us_max", pa.float64()),
                    ("exponent_min", pa.int8()),
                    ("exponent_max", pa.int8()),
                ]
            ),
        ),
        (
            "gave_up",
            pa.struct(
                [
                    ("psn", pa.uint32()),
                    ("retries", pa.int64()),
                    ("last_frame", pa.int64()),
                    ("answers_after", pa.int64()),
                    ("cause", pa.string()),
                ]
            ),
        ),
    ]
)
FLOW_SCHEMA = pa.schema(
    [
        ("conversation", pa.int32()),
        ("transport", pa.string()),
        ("a", pa.string()),
        ("b", pa.string()),
        ("qpn_a", pa.uint32()),
        ("qpn_b", pa.uint32()),
        ("p_key", pa.list_(pa.uint16())),
        ("paired_by", pa.string()),
        ("packets_a_to_b", pa.int64()),
        ("packets_b_to_a", pa.int64()),
        ("bytes_a_to_b", pa.int64()),
        ("bytes_b_to_a", pa.int64()),
        ("payload_bytes", pa.int64()),
        ("first_time", _TIME),
        ("duration_s", pa.float64()),
        ("goodput_bps", pa.float64()),
        ("messages", _COUNTS),
        ("message_bytes", _COUNTS),
        ("one_sided", pa.int64()),
        ("two_sided", pa.int64()),
        ("psn_gaps", pa.int64()),
        ("drops", pa.int64()),
        ("not_captured", pa.int64()),
        ("retransmissions", pa.int64()),
        ("out_of_order", pa.int64()),
        ("length_mismatch", pa.int64()),
        ("bad_icrc", pa.int64()),
        ("not_analysed", pa.string()),
        ("acks", pa.int64()),
        ("naks", pa.map_(pa.string(), pa.int64())),
        ("rnr_naks", pa.int64()),
        ("rnr_timer_ms", pa.map_(pa.float64(), pa.int64())),
        ("ack_coalescing", pa.float64()),
        ("max_outstanding", pa.int64()),
        ("reads_completed", pa.int64()),
        ("unmatched_read_responses", pa.int64()),
        ("unacknowledged_at_end", pa.int64()),
        ("read_latency_us", _LATENCY),
        ("ack_latency_us", _LATENCY),
        ("retries_a", _RETRIES),
        ("retries_b", _RETRIES),
        ("cnp_received_a", pa.int64()),
        ("cnp_received_b", pa.int64()),
        ("ecn_ce", pa.int64()),
    ]
)


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
    for k in ("retries_a", "retries_b"):
        if (r.get(k) or {}).get("gave_up"):
            out[k] = {**r[k], "gave_up": {**r[k]["gave_up"], "psn": int(r[k]["gave_up"]["psn"], 16)}}
    return out


def flow_table(rows: List[dict]) -> pa.Table:
    """The conversation table with FLOW_SCHEMA's columns (also when there are no conversations)."""
    typed = [_typed_flow(r) for r in rows]
    return pa.Table.from_pylist([{k: t.get(k) for k in FLOW_SCHEMA.names} for t in typed], schema=FLOW_SCHEMA)
