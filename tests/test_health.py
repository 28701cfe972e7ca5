"""`ibwire health` on captures/pfc-storm.pcap finds exactly what its scenario declares, its counts equal what
tshark counts in the same capture, and each finding's display filter selects exactly the finding's frames."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import PUBLIC
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

CAPS = Path(__file__).resolve().parents[1] / "captures"
PCAP = CAPS / "pfc-storm.pcap"
SCENARIO = tomllib.loads((CAPS / "pfc-storm.toml").read_text())
QOS = "dscp=26,cnp_dscp=48,pfc_priority=3"


def _health(*args):
    res = run_ibwire("health", PCAP, "--qos", QOS, "-T", "json", *args, unwrapped=True)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout)


@pytest.fixture(scope="module")
def report():
    return _health()


def _tshark_count(flt):
    out = subprocess.run(["tshark", "-r", str(PCAP), "-Y", flt], capture_output=True, text=True, check=True).stdout
    return len(out.splitlines())


def _qp(name, key):
    q = next(q for q in SCENARIO["qp"] if q["name"] == name)
    return int(str(q[key]), 0)


def test_findings_are_exactly_the_declared_ones(report):
    rc, r = report
    want = SCENARIO["expect"]["health"]
    assert rc == 1  # error findings: exit status 1
    assert sorted(f["kind"] for f in r["findings"]) == sorted(want["findings"])
    storms = [f"{f['port']}/{f['priority']}" for f in r["findings"] if f["kind"] == "pause_storm"]
    assert storms == want["pause_storms"]
    for kind in ("ce_unanswered", "cnp_no_rate_cut"):
        qps = sorted(f["flow"].rsplit("QP ", 1)[1] for f in r["findings"] if f["kind"] == kind)
        assert qps == sorted(f"0x{_qp(n, 'dst_qpn'):06x}" for n in want[kind])


def test_storm_lasts_what_the_scenario_sends(report):
    """1100 XOFFs 300 µs apart (each good for 65535 quanta, 335.5 µs at 100 Gb/s), then an XON: 330 ms."""
    _, r = report
    storm = next(p for p in SCENARIO["pfc"] if p["count"] > 100)
    e = next(e for e in r["pause"] if e["priority"] == storm["priority"])
    assert e["longest_s"] == pytest.approx(storm["count"] * storm["interval_us"] * 1e-6, abs=1e-9)
    assert e["xoff"] == sum(p["count"] for p in SCENARIO["pfc"] if p["priority"] == storm["priority"])


def test_pause_and_lldp_frames_equal_tsharks_count(report):
    _, r = report
    want = SCENARIO["expect"]["health"]
    assert sum(e["frames"] for e in r["pause"]) == _tshark_count("macc") == want["pause_frames"]
    assert _tshark_count("lldp") == want["lldp_frames"] == len(r["dcbx"])
    assert r["dcbx"]["02:00:00:00:99:01"]["pfc_enabled"] == [3]
    # per priority, as tshark reads the class-enable vector
    for e in r["pause"]:
        assert e["frames"] == _tshark_count(f"macc.cbfc.enbv.c{e['priority']} == 1")


def test_congestion_counts_equal_tsharks(report):
    _, r = report
    for c in r["congestion"]:
        assert c["ce_marked"] == _tshark_count(f"ip.dsfield.ecn == 3 && infiniband.bth.destqp == {c['qp']}")
        assert c["cnps"] == _tshark_count(
            f"infiniband.bth.opcode == 0x81 && infiniband.bth.destqp == {c['partner_qp']}"
        )
        assert c["partner_qp"] == _qp(
            next(q["name"] for q in SCENARIO["qp"] if _qp(q["name"], "dst_qpn") == c["qp"]), "src_qpn"
        )
    a = next(c for c in r["congestion"] if c["qp"] == _qp("a", "dst_qpn"))
    judged = [x["cut"] for x in a["reactions"] if x["cut"] is not None]
    assert judged and all(judged)  # rate_cut = 0.5: every judged CNP halves the rate
    # whole packets in a 20 µs window: a halved rate measures 0.5-0.65 of the one before
    assert all(x["rate_after_bps"] <= 0.7 * x["rate_before_bps"] for x in a["reactions"] if x["cut"])


def test_ecmp_source_ports_equal_tsharks(report):
    _, r = report
    for e in r["ecmp"]["flows"]:
        out = subprocess.run(
            [
                "tshark",
                "-r",
                str(PCAP),
                "-Y",
                f"infiniband.bth.destqp == {e['qp']} && ip.src == {e['src']}",
                "-T",
                "fields",
                "-e",
                "udp.srcport",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert e["udp_srcports"] == sorted({int(x) for x in out.split()})
    assert r["ecmp"]["distinct_srcports"] == 4


def test_each_findings_filter_selects_its_frames(report):
    _, r = report
    for f in r["findings"]:
        out = run_ibwire("decode", PCAP, "-Y", f["filter"], "-T", "fields", "-e", "frame.number", check=True).stdout
        got = [int(x) for x in out.split()]
        assert len(got) == f["frame_count"] and got[:50] == f["frames"], f["kind"]


def test_thresholds_and_port_speed_change_the_verdicts():
    _, r = _health("--storm-ms", "500")
    assert "pause_storm" not in {f["kind"] for f in r["findings"]}
    _, fast = _health()
    _, slow = _health("--port-speed", "25G")
    p5 = [next(e for e in x["pause"] if e["priority"] == 5) for x in (fast, slow)]
    assert p5[0]["paused_s"] == pytest.approx(3 * 1000 * 512 / 100e9)
    assert p5[1]["paused_s"] == pytest.approx(4 * p5[0]["paused_s"])


def test_without_expectations_only_what_the_capture_itself_shows():
    res = run_ibwire("health", PCAP, "-T", "json", unwrapped=True)
    kinds = {f["kind"] for f in json.loads(res.stdout)["findings"]}
    assert "qos_mismatch" not in kinds and "pause_storm" in kinds
    assert "roce_unprotected" in kinds  # LLDP DCBX says PFC protects priority 3 only


@pytest.mark.parametrize("qos, words", [("dscp=64", "from 0 to 63"), ("color=3", "unknown key"), ("dscp", "key=value")])
def test_bad_qos_is_one_sentence(qos, words):
    res = run_ibwire("health", PCAP, "--qos", qos)
    assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr


def test_table_output_names_the_storm():
    res = run_ibwire("health", PCAP, "--qos", QOS, unwrapped=True)
    assert res.returncode == 1
    assert "pause storm: port 02:00:00:00:99:01 kept priority 3 paused for 330 ms" in res.stdout


def test_real_capture_whose_qps_share_one_source_port(tshark):
    """A public capture of UCCL/NCCL traffic: every RoCEv2 QP uses UDP source port 4791, which tshark shows
    too; the finding counts the frames tshark selects with the same addresses and port."""
    path = PUBLIC / "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap"
    r = json.loads(run_ibwire("health", path, "-T", "json", unwrapped=True).stdout)
    one = [f for f in r["findings"] if f["kind"] == "ecmp_one_srcport"]
    assert one and r["ecmp"]["distinct_srcports"] == 1
    for f in one:
        src, dst = f["src"], f["dst"]
        out = subprocess.run(
            [
                tshark,
                "-r",
                str(path),
                "-Y",
                f"ip.src == {src} && ip.dst == {dst} && udp.dstport == 4791",
                "-T",
                "fields",
                "-e",
                "udp.srcport",
                "-e",
                "infiniband.bth.destqp",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        rows = [x.split("\t") for x in out if x]
        assert {p for p, _ in rows} == {"4791"} and len(rows) == f["frame_count"]
        assert len({q for _, q in rows}) >= int(f["text"].split()[0])  # "21 QPs from …"


@pytest.mark.parametrize("capture", ["congestion.pcap", "congestion-ib.pcap"])
def test_marks_and_cnps_equal_the_congestion_scenarios_declaration(capture):
    """ECN-CE on RoCEv2, FECN on native InfiniBand (flows between LIDs): the marks and CNPs the congestion
    scenario declares, and the findings' filters select their frames on either link."""
    want = tomllib.loads((CAPS / "congestion.toml").read_text())["expect"]["count"]
    r = json.loads(run_ibwire("health", CAPS / capture, "-T", "json", unwrapped=True).stdout)
    (c,) = r["congestion"]
    assert (c["ce_marked"], c["cnps"]) == (want["ecn_marked"], want["cnps"])
    assert c["flow"].startswith("LID 257 → LID 258" if capture.endswith("-ib.pcap") else "10.2.0.1 → 10.2.0.2")
    for f in r["findings"]:
        out = run_ibwire(
            "decode", CAPS / capture, "-Y", f["filter"], "-T", "fields", "-e", "frame.number", check=True
        ).stdout
        assert [int(x) for x in out.split()] == f["frames"], f["kind"]
