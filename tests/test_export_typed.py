"""Exported Parquet is typed the way query engines want it: integers for QPN/P_Key/LID, frame_time as
timestamp[ns] equal to tshark's frame.time_epoch, null where the packet has no such header (tshark prints
nothing there), nested values as structs/maps/lists, and the full schema even without rows (DuckDB reads
a zero-conversation flows file)."""

import json
import subprocess
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_export_parquet import run_ibwire

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
CAPS = ROOT / "captures"

# export column -> tshark field (presence and value compared packet by packet)
ORACLE = {
    "eth_src": "eth.src",
    "lrh_slid": "infiniband.lrh.slid",
    "lrh_dlid": "infiniband.lrh.dlid",
    "bth_destqp": "infiniband.bth.destqp",
    "bth_p_key": "infiniband.bth.p_key",
    "reth_dmalen": "infiniband.reth.dmalen",
    "aeth_syndrome": "infiniband.aeth.syndrome",
    "deth_srcqp": "infiniband.deth.srcqp",
    "udp_dstport": "udp.dstport",
    "vlan_id": "vlan.id",
}


def _tshark(path, fields):
    args = ["tshark", "-r", str(path), "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.parametrize(
    "name", ["srinivas_infiniband.pcap", "m3_rdma-write-read_ibdump_read2.pcap", "m3_02-2-write_ibdump_write.pcap"]
)
def test_columns_are_typed_and_null_where_tshark_shows_no_header(name, tmp_path, tshark):
    out = tmp_path / "p.parquet"
    r = run_ibwire("export", PUBLIC / name, "-o", out)
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out)
    s = t.schema
    assert s.field("frame_time").type == pa.timestamp("ns", tz="UTC")
    assert s.field("bth_destqp").type == pa.uint32() and s.field("bth_p_key").type == pa.uint16()
    assert s.field("lrh_slid").type == pa.uint16() and s.field("lrh_dlid").type == pa.uint16()
    rows = t.to_pylist()
    want = _tshark(PUBLIC / name, ["frame.time_epoch", *ORACLE.values()])
    assert len(rows) == len(want)
    ns = t.column("frame_time").cast(pa.int64()).to_pylist()
    for row, got_ns, w in zip(rows, ns, want):
        # ERF records carry a finer time of their own, which tshark shows; the pcap record's is in µs
        slack = 1000 if row["link_kind"] in ("ib", "ib+grh") else 0
        assert abs(got_ns - int(Decimal(w[0]) * 10**9)) <= slack, row["frame_number"]
        for (col, field), text in zip(ORACLE.items(), w[1:]):
            if col in ("udp_dstport", "vlan_id") and row["link_kind"] not in ("roce2v4", "roce2v6"):
                continue  # tshark also shows UDP/VLAN of non-RoCE frames; only RoCE ones are compared
            v = row[col]
            if not text:
                assert v is None, f"frame {row['frame_number']}: {col} is {v!r}, tshark shows no {field}"
            elif col == "eth_src":
                assert v == text
            else:
                assert v == int(text, 0), f"frame {row['frame_number']}: {col}"


def test_flows_table_is_typed(tmp_path):
    pcap = CAPS / "loss-retransmit.pcap"
    r = run_ibwire("export", pcap, "-o", tmp_path / "p.parquet", "--flows", tmp_path / "f.parquet")
    assert r.returncode == 0, r.stderr
    t = pq.read_table(tmp_path / "f.parquet")
    s = t.schema
    assert s.field("qpn_a").type == pa.uint32() and s.field("p_key").type == pa.list_(pa.uint16())
    assert s.field("first_time").type == pa.timestamp("ns", tz="UTC")
    assert pa.types.is_struct(s.field("messages").type) and pa.types.is_map(s.field("naks").type)
    assert pa.types.is_struct(s.field("ack_latency_us").type)
    ref = json.loads(run_ibwire("flows", pcap, "--format", "json").stdout)["conversations"]
    got = t.to_pylist()
    assert len(got) == len(ref)
    for g, w in zip(got, ref):
        assert g["qpn_a"] == (int(w["qpn_a"], 16) if w["qpn_a"] else None)
        assert g["p_key"] == [int(p, 16) for p in w["p_key"].split(",")]
        assert {k: v for k, v in g["messages"].items() if v} == w["messages"]
        assert dict(g["naks"] or []) == (w.get("naks") or {})
    # DuckDB reads the nested columns directly
    con = duckdb.connect()
    n = con.execute(f"select sum(messages.write), sum(drops) from '{tmp_path / 'f.parquet'}'").fetchone()
    assert n == (sum(w["messages"].get("write", 0) for w in ref), sum(w.get("drops", 0) for w in ref))


def test_zero_rows_keep_the_full_schema_and_duckdb_reads_them(tmp_path):
    """A capture with packets but no conversation (management only) and one with no packet at all."""
    empty = tmp_path / "none.pcap"
    empty.write_bytes((CAPS / "atomics.pcap").read_bytes()[:24])
    con = duckdb.connect()
    for src in (empty, PUBLIC / "scapy_roce_uts_cnp_cx4lx.pcap", CAPS / "sm-sweep.pcap"):
        p, f = tmp_path / f"{src.stem}-p.parquet", tmp_path / f"{src.stem}-f.parquet"
        r = run_ibwire("export", src, "-o", p, "--flows", f)
        assert r.returncode == 0, r.stderr
        conv = json.loads(run_ibwire("flows", src, "--format", "json").stdout)["conversations"]
        rows = con.execute(f"select count(*), coalesce(sum(drops), 0), count(distinct qpn_a) from '{f}'").fetchone()
        assert rows[0] == len(conv)
        cols = {c[0]: c[1] for c in con.execute(f"describe select * from '{f}'").fetchall()}
        assert cols["qpn_a"] == "UINTEGER" and cols["first_time"].startswith("TIMESTAMP")
        assert cols["messages"].startswith("STRUCT(send BIGINT")
        cols = {c[0]: c[1] for c in con.execute(f"describe select * from '{p}'").fetchall()}
        assert cols["bth_p_key"] == "USMALLINT" and cols["lrh_slid"] == "USMALLINT"
