"""Parquet files and hive-partitioned datasets of the per-packet records and of the conversation table.

The tables and their types are `arrow`'s.  Reading and decoding run on a second thread (`files.ahead`)
while this one builds each row group's table and encodes it; pyarrow is imported once that thread runs.
"""

from typing import List

import numpy as np

from ibwire.analyze.presence import prepare
from ibwire.files.ahead import read_ahead

ROW_GROUP = 1 << 15  # records per Parquet row group (batches are joined up to this; memory stays flat)

# Parquet settings: dictionary pages for the columns that are dictionaries already and for the addresses (a
# capture has few endpoints; the other columns are numbers with many values, where a dictionary costs time
# and bytes); delta encoding for the columns that grow by small steps (time, frame number, PSN, MSN:
# smaller and faster than plain values); LZ4 (LZ4_RAW: 15% less encoding time than zstd at level 1 for
# files twice as large, still a few bytes per packet; DuckDB and Spark 3.5 read it); each row group's
# column encoded in one go (write_batch_size); statistics for the columns queries filter on.
PARQUET = {
    "compression": "lz4",
    "data_page_version": "2.0",
    "use_dictionary": [
        "link_kind",
        "icrc_status",
        "vcrc_status",
        "operation",
        "addr_src",
        "addr_dst",
        "eth_src",
        "eth_dst",
    ],
    "write_batch_size": ROW_GROUP,
    "column_encoding": {c: "DELTA_BINARY_PACKED" for c in ("frame_time", "frame_number", "bth_psn", "aeth_msn")},
    # min/max per row group where queries select (DuckDB and Spark skip row groups by them)
    "write_statistics": [
        "frame_time",
        "frame_number",
        "bth_opcode",
        "bth_p_key",
        "bth_destqp",
        "bth_psn",
        "lrh_slid",
        "lrh_dlid",
        "udp_srcport",
        "udp_dstport",
    ],
}


def row_groups(scan, progress=None):
    """An Arrow table per row group of `scan` (a decode.scan.Scan or FilteredScan), read, decoded and prepared
    (`presence.prepare`) ahead on a second thread, which starts now (so that importing pyarrow overlaps
    it); `progress(packets, bytes done)` after each.  The block of columns under a table is filled again once the table is gone (fresh
    memory costs page faults)."""
    spare: list = []
    ahead = read_ahead(((cols, prepare(cols), scan.bytes_done) for cols in scan.columns(ROW_GROUP, spare)), depth=1)

    def tables():
        from ibwire.analyze.arrow import column_table

        for cols, prepared, done in ahead:
            if progress:
                progress(len(cols), done)
            table = column_table(cols, prepared)
            yield table
            del table
            spare.append(cols)

    return tables()


def write_records(scan, where, progress=None) -> int:
    """The records of `scan` (a decode.scan.Scan or FilteredScan) into one Parquet file (`where`: a path or a
    binary file object)."""
    tables = row_groups(scan, progress)
    import pyarrow.parquet as pq

    from ibwire.analyze.arrow import SCHEMA

    n = 0
    with pq.ParquetWriter(where, SCHEMA, **PARQUET) as writer:
        for table in tables:
            writer.write_table(table)
            n += table.num_rows
            del table  # its block of columns can be filled again
    return n


def write_flows(rows: List[dict], where) -> None:
    """The conversation table as Parquet (`where`: a path or a binary file object)."""
    import pyarrow.parquet as pq

    from ibwire.analyze.arrow import flow_table

    pq.write_table(flow_table(rows), where)


# --- fleet datasets: hive-partitioned by host and date -------------------------------------------------

PARTITION_KEYS = ("host", "date")
_DAY_NS = 86_400 * 10**9


def partition_keys(text: str) -> List[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in PARTITION_KEYS]
    if bad or not keys or len(set(keys)) != len(keys):
        from ibwire.errors import UserError

        raise UserError(f"--partition-by {text}: give host, date or both, e.g. host,date")
    return keys


def _days(ns: np.ndarray) -> np.ndarray:
    return ns // _DAY_NS


def _day_text(day: int) -> str:
    return str(np.datetime64(int(day), "D"))


def _split_by_day(table, ns: np.ndarray):
    """(day, rows of that UTC day) for each day the table's times fall in."""
    import pyarrow as pa

    days = _days(ns)
    for d in np.unique(days).tolist():
        yield (
            d,
            table
            if (days == d).all()
            else table.take(
                pa.Array.from_buffers(
                    pa.int64(), int((days == d).sum()), [None, pa.py_buffer(np.flatnonzero(days == d).astype(np.int64))]
                )
            ),
        )


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

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ibwire.analyze.arrow import FLOW_SCHEMA, SCHEMA, flow_table
    from ibwire.analyze.packets import CaptureAnalysis
    from ibwire.decode.scan import scan
    from ibwire.files.outfile import output_file

    name = os.path.splitext(os.path.basename(path))[0] + ".parquet"
    s = scan(path, icrc=icrc)
    rc = CaptureAnalysis(path, icrc)
    s.fill = rc.fill
    n = 0
    with ExitStack() as stack:
        writers: dict = {}

        def writer(table_name, day, schema):
            key = (table_name, day if "date" in keys else None)
            if key not in writers:
                d = _part_dir(root, table_name, keys, host, day)
                os.makedirs(d, exist_ok=True)
                f = stack.enter_context(output_file(os.path.join(d, name), inputs=[path]))
                writers[key] = stack.enter_context(pq.ParquetWriter(f, schema, **(PARQUET if schema is SCHEMA else {})))
            return writers[key]

        first_day = 0
        for t in row_groups(s, progress):
            ns = t.column("frame_time").cast(pa.int64()).to_numpy()
            first_day = first_day or (int(_days(ns[:1])[0]) if len(ns) else 0)
            for day, part in _split_by_day(t, ns) if "date" in keys else [(0, t)]:
                writer("packets", day, SCHEMA).write_table(part)
            n += t.num_rows
        if not n:  # an empty capture still leaves a (zero-row) file
            writer("packets", first_day, SCHEMA)
        rows = rc.conversations
        ft = flow_table(rows)
        ns = np.array([r.get("first_time_ns") or 0 for r in rows], np.int64)
        for day, part in _split_by_day(ft, ns) if "date" in keys and rows else [(first_day, ft)]:
            writer("flows", day, FLOW_SCHEMA).write_table(part)
    return n, len(rows), list(s.problems)
