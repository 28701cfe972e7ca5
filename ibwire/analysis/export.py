"""Typed Arrow/Parquet tables of per-packet records and of the conversation table (pyarrow).

Field names are the display-filter keys with dots turned into underscores (`bth_p_key`).  Every column
has one type whatever the capture holds, so a table with zero rows has the full schema: integers for
QPNs, P_Keys and LIDs, `frame_time` as timestamp[ns, UTC], addresses as 16-byte binaries and also as
dictionary-encoded text, opcodes and CRC statuses as names; a header the packet does not carry (LRH on
RoCE, Ethernet on native InfiniBand, RETH on a SEND) is null, not zero.
"""
import threading
from queue import Queue
from typing import List

import numpy as np
import pyarrow as pa

from dissectors.opcodes import OPCODES, lookup
from ..fast import _native
from ..fast import records as R
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
_HAS = {h: np.array([h in OPCODES[c].headers if c in OPCODES else False for c in range(256)])
        for h in set(_EXT_OF.values())}
_ETH_LINKS = np.array([k in (R.ROCE1, R.ROCE2V4, R.ROCE2V6) for k in range(256)])
_LRH_LINKS = np.array([k in (R.IB, R.IBGRH) for k in range(256)])
_UDP_LINKS = np.array([k in (R.ROCE2V4, R.ROCE2V6) for k in range(256)])
_SKIP = ("time", "time_ns")   # the record's float and integer times become the one frame_time column


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
    records or their columns (split_columns)."""
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
    out.update({f: bth & _HAS[h][op] for f, h in _EXT_OF.items()})
    return out


def _arrow_type(field: str) -> pa.DataType:
    dt = R.RECORD[field]
    if dt.kind == "V":
        return pa.binary(dt.itemsize)
    if field in ("icrc", "vcrc", "link"):
        return pa.dictionary(pa.int8(), pa.string())
    if field == "vlan":
        return pa.uint16()
    return pa.from_numpy_dtype(dt)


def record_schema() -> pa.Schema:
    """The export's columns and types (the same for every capture, with or without packets)."""
    fields = [pa.field("frame_time", _TIME)]
    fields += [pa.field(_name(f), _arrow_type(f)) for f in R.RECORD.names if f not in _SKIP]
    dict_str = pa.dictionary(pa.int32(), pa.string())
    fields += [pa.field("src_addr", dict_str), pa.field("dst_addr", dict_str), pa.field("operation", dict_str)]
    return pa.schema(fields)


def _strings(words) -> pa.Array:
    """A string array built from its buffers (pa.array on Python objects imports pandas when present:
    +50 MB resident)."""
    data = [w.encode() for w in words]
    offsets = np.zeros(len(data) + 1, np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


_ADDR_TEXT: dict = {}      # 16-byte address -> its text (a capture has few endpoints; ipaddress is slow)


def _addr_text(w: bytes) -> str:
    t = _ADDR_TEXT.get(w)
    if t is None:
        if len(_ADDR_TEXT) > 1 << 16:
            _ADDR_TEXT.clear()
        t = _ADDR_TEXT[w] = R.addr_text(w)
    return t


def _text_dict(rec: np.ndarray, field: str, bitmap) -> pa.DictionaryArray:
    """An address column as a dictionary of its distinct values in text (null where absent)."""
    _, first, inv = group_rows(rec, (field,))
    col = rec[field]
    words = [_addr_text(bytes(col[i])) for i in first.tolist()]
    idx = pa.Array.from_buffers(pa.int32(), len(rec), [bitmap, pa.py_buffer(inv.astype(np.int32))], null_count=-1)
    return pa.DictionaryArray.from_arrays(idx, _strings(words))


_SCHEMA = record_schema()
_NAMES = _strings(_OPNAMES)
_LINK_NAMES, _CRC_NAMES = _strings(R.LINK_KINDS), _strings(R.CRC_STATUS)


_FIELDS = R.RECORD.names
_OFFSETS = np.array([R.RECORD.fields[f][1] for f in _FIELDS], np.int64)
_SIZES = np.array([R.RECORD.fields[f][0].itemsize for f in _FIELDS], np.int64)
_STARTS = np.concatenate(([0], np.cumsum(_SIZES)))


def split_columns(rec: np.ndarray) -> dict:
    """Field -> its contiguous column, all cut from one buffer filled in one compiled pass over `rec`."""
    rec = np.ascontiguousarray(rec)
    n = len(rec)
    out = np.empty(n * int(_STARTS[-1]), np.uint8)
    _native.columns(rec, rec.dtype.itemsize, _OFFSETS, _SIZES, out)
    return {f: out[n * int(a):n * int(b)].view(R.RECORD.fields[f][0])
            for f, a, b in zip(_FIELDS, _STARTS[:-1], _STARTS[1:])}


def record_table(rec: np.ndarray) -> pa.Table:
    """One row per record with the columns of `record_schema()`."""
    n = len(rec)
    cols_of = split_columns(rec)
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

    cols = [column(_TIME, cols_of["time_ns"])]
    for f in R.RECORD.names:
        if f in _SKIP:
            continue
        c = cols_of[f]
        typ = _SCHEMA.field(_name(f)).type
        if f in ("icrc", "vcrc", "link"):
            idx = column(pa.int8(), c.view(np.int8), None if f == "link" else c != R.ABSENT)
            cols.append(pa.DictionaryArray.from_arrays(idx, _LINK_NAMES if f == "link" else _CRC_NAMES))
        elif f == "vlan":
            cols.append(column(typ, c.astype(np.uint16), present[f]))
        else:
            cols.append(column(typ, c, present.get(f)))
    cols.append(_text_dict(rec, "src", bitmap(present["src"])))
    cols.append(_text_dict(rec, "dst", bitmap(present["dst"])))
    cols.append(pa.DictionaryArray.from_arrays(column(pa.int32(), cols_of["opcode"].astype(np.int32), present["opcode"]),
                                               _NAMES))
    return pa.Table.from_arrays(cols, schema=_SCHEMA)


# --- the conversation table -------------------------------------------------------------------------------

MESSAGE_KINDS = ("send", "write", "read", "atomic", "flush", "atomic_write", "resync", "unknown")
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


# Parquet settings: dictionary pages only for the columns that are dictionaries already (the others are
# numbers with many values, where a dictionary costs time and bytes), zstd at its fastest level, statistics
# for the columns queries filter on.
PARQUET = {"compression": "zstd", "compression_level": 1, "data_page_version": "2.0",
           "use_dictionary": ["link_kind", "icrc_status", "vcrc_status", "src_addr", "dst_addr", "operation"],
           # min/max per row group where queries select (DuckDB and Spark skip row groups by them)
           "write_statistics": ["frame_time", "frame_number", "bth_opcode", "bth_p_key", "bth_destqp", "bth_psn",
                                "lrh_slid", "lrh_dlid", "udp_srcport", "udp_dstport"]}
ROW_GROUP = 1 << 16        # rows per Parquet row group (batches are gathered up to this; memory stays flat)


def tables(batches, progress=None, scan=None):
    """Arrow tables of `batches`: a second thread decodes (the compiled decoder releases the GIL), the
    caller's thread turns each batch into a table and encodes it (the Parquet encoder releases it too), so
    the two halves, of about equal cost, overlap; at most a few batches wait in between."""
    q: Queue = Queue(maxsize=3)
    stop = threading.Event()

    def produce():
        try:
            for rec in batches:
                if stop.is_set():
                    return
                q.put((rec, len(rec), scan.bytes_done if scan is not None else 0))
        except BaseException as e:          # noqa: B036  (handed to the consumer and raised there)
            q.put(e)
            return
        q.put(None)

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            rec, n, done = item
            if progress:
                progress(n, done)
            yield record_table(rec)
    finally:
        stop.set()
        while worker.is_alive():            # unblock a producer waiting on a full queue
            while not q.empty():
                q.get_nowait()
            worker.join(0.05)


def write_records(batches, where, progress=None, scan=None) -> int:
    """Stream record batches into one Parquet file (`where`: a path or a binary file object)."""
    import pyarrow.parquet as pq
    n, pending, rows = 0, [], 0
    with pq.ParquetWriter(where, _SCHEMA, **PARQUET) as writer:
        for t in tables(batches, progress, scan):
            pending.append(t)
            rows += t.num_rows
            if rows >= ROW_GROUP:
                writer.write_table(pa.concat_tables(pending))
                n, pending, rows = n + rows, [], 0
        if pending:
            writer.write_table(pa.concat_tables(pending))
            n += rows
    return n


def write_flows(rows: List[dict], where) -> None:
    """The conversation table as Parquet (`where`: a path or a binary file object)."""
    import pyarrow.parquet as pq
    pq.write_table(flow_table(rows), where)


# --- fleet datasets: hive-partitioned by host and date -------------------------------------------------

PARTITION_KEYS = ("host", "date")
_DAY_NS = 86_400 * 10**9


def partition_keys(text: str) -> List[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in PARTITION_KEYS]
    if bad or not keys or len(set(keys)) != len(keys):
        from ..errors import UserError
        raise UserError(f"--partition-by {text}: give host, date or both, e.g. host,date")
    return keys


def _days(ns: np.ndarray) -> np.ndarray:
    return ns // _DAY_NS


def _day_text(day: int) -> str:
    return str(np.datetime64(int(day), "D"))


def _split_by_day(table: pa.Table, ns: np.ndarray):
    """(day, rows of that UTC day) for each day the table's times fall in."""
    days = _days(ns)
    for d in np.unique(days).tolist():
        yield d, table if (days == d).all() else table.take(pa.Array.from_buffers(
            pa.int64(), int((days == d).sum()), [None, pa.py_buffer(np.flatnonzero(days == d).astype(np.int64))]))


def _part_dir(root, table: str, keys: List[str], host: str, day: int):
    import os
    parts = [f"{k}={host if k == 'host' else _day_text(day)}" for k in keys]
    return os.path.join(str(root), table, *parts)


def write_capture_partitions(path: str, host: str, root, keys: List[str], icrc: bool = True, progress=None):
    """One capture into the dataset at `root`: its packets under root/packets/host=…/date=…/ and its
    conversations under root/flows/…, each file named after the capture and written whole or not at all.
    Returns (packets, conversations)."""
    import os
    from contextlib import ExitStack

    import pyarrow.parquet as pq

    from ..fast import scan
    from ..outfile import output_file
    from .flows import analyse
    name = os.path.splitext(os.path.basename(path))[0] + ".parquet"
    s = scan(path, icrc=icrc)
    n = 0
    with ExitStack() as stack:
        writers: dict = {}

        def writer(table_name, day, schema):
            key = (table_name, day if "date" in keys else None)
            if key not in writers:
                d = _part_dir(root, table_name, keys, host, day)
                os.makedirs(d, exist_ok=True)
                f = stack.enter_context(output_file(os.path.join(d, name), inputs=[path]))
                writers[key] = stack.enter_context(pq.ParquetWriter(f, schema, **(PARQUET if schema is _SCHEMA else {})))
            return writers[key]
        first_day = 0
        for t in tables(s, progress, s):
            ns = t.column("frame_time").cast(pa.int64()).to_numpy()
            first_day = first_day or (int(_days(ns[:1])[0]) if len(ns) else 0)
            for day, part in (_split_by_day(t, ns) if "date" in keys else [(0, t)]):
                writer("packets", day, _SCHEMA).write_table(part)
            n += t.num_rows
        if not n:                                   # an empty capture still leaves a (zero-row) file
            writer("packets", first_day, _SCHEMA)
        rows = analyse(path, icrc)["conversations"]
        ft = flow_table(rows)
        ns = np.array([r.get("first_time_ns") or 0 for r in rows], np.int64)
        for day, part in (_split_by_day(ft, ns) if "date" in keys and rows else [(first_day, ft)]):
            writer("flows", day, FLOW_SCHEMA).write_table(part)
    return n, len(rows), list(s.problems)
