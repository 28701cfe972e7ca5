"""The notebook API: `import ibwire` is cheap; ibwire.read gives a pyarrow Table (pandas too) of the export's
columns, its filter keeps what tshark -Y keeps; ibwire.flows/fabric/audit return typed objects whose numbers
are the scenarios' declared ground truth."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
from conftest import run_ibwire

import ibwire
from ibwire.analyze.conversation import Conversation, Latency
from ibwire.audit.findings import Finding
from ibwire.notebook import AuditResult, Fabric, Node, Port

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
CAPS = ROOT / "captures"


def test_import_ibwire_loads_no_heavy_module():
    code = "import sys, ibwire; print(sorted(m for m in ('numpy', 'pyarrow', 'scapy', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_read_is_the_export_table_and_filters_like_tshark(tmp_path, tshark):
    cap = PUBLIC / "m3_nvme_nvme-discover.pcap"
    t = ibwire.read(cap)
    assert run_ibwire("export", cap, "-o", tmp_path / "x.parquet").returncode == 0
    exported = pq.read_table(tmp_path / "x.parquet")
    assert t.schema.names == exported.schema.names
    assert t.to_pylist() == exported.to_pylist()
    df = t.to_pandas()
    assert len(df) == 65 and str(df["frame_time"].dtype) == "datetime64[ns, UTC]"
    acks = ibwire.read(cap, filter="bth.opcode == 0x11")
    out = subprocess.run(
        ["tshark", "-r", str(cap), "-Y", "infiniband.bth.opcode == 0x11", "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert acks["frame_number"].to_pylist() == [int(x) for x in out.split()]
    assert ibwire.read(cap, filter="bth.opcode == 0x11 && bth.opcode == 0x12").num_rows == 0


def test_flows_are_typed_and_equal_the_scenario():
    scen = tomllib.loads((CAPS / "loss-retransmit.toml").read_text())
    res = ibwire.flows(CAPS / "loss-retransmit.pcap")
    assert all(isinstance(c, Conversation) for c in res)
    for q in scen["qp"]:
        want = scen["expect"]["flow"].get(q["name"])
        if not want:
            continue
        (c,) = [
            c for c in res if {q["src_qpn"], q["dst_qpn"]} >= {c.qpn_a, c.qpn_b} - {None} and c.transport == q["type"]
        ]
        assert sum(c.messages.values()) == want["messages"] and sum(c.message_bytes.values()) == want["bytes"]
        assert (c.drops, c.retransmissions, c.rnr_naks, c.bad_icrc) == (
            want["drops"],
            want["retransmits"],
            want["rnr"],
            want.get("bad_icrc", 0),
        )
        assert c.naks.get("PSN Sequence Error", 0) == want["naks_psn"]
        assert c.lossy == bool(want["drops"] or want["retransmits"] or want["naks_psn"] or want.get("bad_icrc"))
        assert isinstance(c.ack_latency_us, Latency) and isinstance(c.qpn_b, int)
    assert res.to_arrow().num_rows == len(res) and len(res.to_pandas()) == len(res)


def test_fabric_is_typed_and_holds_the_scenario_ports():
    scen = tomllib.loads((CAPS / "sm-sweep.toml").read_text())
    fab = ibwire.fabric(CAPS / "sm-sweep.pcap")
    assert isinstance(fab, Fabric) and all(isinstance(n, Node) for n in fab.nodes)
    assert all(isinstance(p, Port) for p in fab.ports)
    lids = {p.lid for p in fab.ports if p.lid}
    assert {int(str(p["lid"]), 0) for p in scen["port"]} <= lids
    assert fab.master_sm is not None and fab.master_sm.state == "MASTER"


def test_audit_returns_the_scenario_findings():
    base = CAPS / "multitenant-breach"
    res = ibwire.audit(f"{base}.pcap", policy=f"{base}.partitions.conf", tenants=f"{base}.tenants.toml")
    assert isinstance(res, AuditResult) and res.verdict == "FAIL" and not res.passed
    assert all(isinstance(f, Finding) for f in res.findings)
    want = {f["rule"] for f in tomllib.loads((base.with_suffix(".toml")).read_text())["expect"]["findings"]}
    assert want <= {f.rule for f in res.findings}
    clean = CAPS / "multitenant-clean"
    ok = ibwire.audit(f"{clean}.pcap", policy=f"{clean}.partitions.conf", tenants=f"{clean}.tenants.toml")
    assert ok.passed and ok.findings == [] or all(f.severity in ("info", "warning") for f in ok.findings)


def test_storage_is_the_json_and_parquet_tables(tmp_path):
    """ibwire.storage gives the sections of `stats --storage --format json` as tables, the NVMe-oF commands with
    the Parquet export's columns; the RPC calls of the NFS sample are its declared 13 calls."""
    import json

    cap = PUBLIC / "m3_nvme_host-echo_dump.pcap"
    t = ibwire.storage(cap, decode_as=["nvme-rdma"])
    doc = json.loads(run_ibwire("stats", "--storage", cap, "-d", "nvme-rdma", "-T", "json").stdout)
    assert t["commands"].to_pylist() == doc["commands"] and len(doc["commands"]) == 10
    assert t["by_opcode"].to_pylist() == doc["by_opcode"]
    assert (
        run_ibwire(
            "export", cap, "-o", tmp_path / "p.parquet", "--storage", tmp_path / "c.parquet", "-d", "nvme-rdma"
        ).returncode
        == 0
    )
    assert t["commands"].equals(pq.read_table(tmp_path / "c.parquet"))
    nfs = ibwire.storage(CAPS / "nfs-rdma.pcap")
    declared = tomllib.loads((CAPS / "nfs-rdma.toml").read_text())["expect"]["count"]["rpc_calls"]
    doc = json.loads(run_ibwire("stats", "--storage", CAPS / "nfs-rdma.pcap", "-T", "json").stdout)
    assert nfs["rpc_calls"].to_pylist() == doc["rpc_calls"] and nfs["rpc_calls"].num_rows == declared
    out = tmp_path / "nfs.parquet"
    assert run_ibwire("export", CAPS / "nfs-rdma.pcap", "-o", tmp_path / "q.parquet", "--storage", out).returncode == 0
    assert pq.read_table(tmp_path / "nfs-nfs.parquet").equals(nfs["rpc_calls"])
    assert not (tmp_path / "nfs-iser.parquet").exists()
