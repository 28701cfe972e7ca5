"""Parquet export of per-packet records and of the conversation table (pyarrow), streamed batch by batch.

Field names are the display-filter keys with dots turned into underscores (`bth_p_key`); addresses are
kept as 16-byte binaries and also as dictionary-encoded text, opcodes and statuses as readable names.
"""
import json
from typing import List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dissectors.opcodes import lookup
from ..errors import UserError
from ..fast import records as R
from .hashing import group_rows

_OPNAMES = [lookup(c).full_name for c in range(256)]


def _name(field: str) -> str:
    return R.FIELD_KEYS.get(field, field).replace(".", "_")


def _text_dict(rec: np.ndarray, field: str, fmt) -> pa.DictionaryArray:
    """An address column as a dictionary of its distinct values in text (null where all zero)."""
    _, first, inv = group_rows(rec, (field,))
    col = rec[field]
    words = [bytes(col[i]) for i in first.tolist()]
    empty = np.array([not w.strip(b"\0") for w in words], bool)
    inv = inv.astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(inv, mask=empty[inv] if len(words) else None),
                                          pa.array([fmt(w) for w in words], pa.string()))


def _enum(col: np.ndarray, names) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(col.astype(np.int32)), pa.array(list(names), pa.string()))


def record_table(rec: np.ndarray) -> pa.Table:
    cols, names = [], []
    bth = (rec["flags"] & R.F_BTH) > 0
    for f in R.RECORD.names:
        c = rec[f]
        if c.dtype.kind == "V":
            n = c.dtype.itemsize
            arr = pa.FixedSizeBinaryArray.from_buffers(pa.binary(n), len(c), [None, pa.py_buffer(np.ascontiguousarray(c).tobytes())])
        elif f in ("icrc", "vcrc"):
            arr = _enum(c, R.CRC_STATUS)
        elif f == "link":
            arr = _enum(c, R.LINK_KINDS)
        else:
            arr = pa.array(np.ascontiguousarray(c))
        cols.append(arr)
        names.append(_name(f))
    for f, fmt in (("src", R.addr_text), ("dst", R.addr_text)):
        cols.append(_text_dict(rec, f, fmt))
        names.append(f"{f}_addr")
    ops = pa.array(rec["opcode"].astype(np.int32), mask=~bth)
    cols.append(pa.DictionaryArray.from_arrays(ops, pa.array(_OPNAMES, pa.string())))
    names.append("operation")
    return pa.Table.from_arrays(cols, names=names)


def write_records(batches, path: str, progress=None, scan=None) -> int:
    writer, n = None, 0
    try:
        for rec in batches:
            t = record_table(rec)
            if writer is None:
                writer = pq.ParquetWriter(path, t.schema, compression="zstd")
            writer.write_table(t)
            n += len(rec)
            if progress and scan is not None:
                progress(len(rec), scan.bytes_done)
        if writer is None:
            pq.write_table(record_table(np.zeros(0, R.RECORD)), path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e}") from None
    finally:
        if writer is not None:
            writer.close()
    return n


def write_flows(rows: List[dict], path: str) -> None:
    """Conversation rows; nested dicts (messages, NAKs, latency percentiles) become JSON strings."""
    flat = [{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in r.items()} for r in rows]
    keys = list(dict.fromkeys(k for r in flat for k in r))
    table = pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in flat]) if flat else pa.table({})
    try:
        pq.write_table(table, path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e}") from None
