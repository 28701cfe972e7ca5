"""`ibwire flows` / `ibwire stats` report exactly the events the generator's scenarios declare
(captures/*.toml `[expect]`): messages, bytes, drops, retransmissions, PSN NAKs, RNR, bad ICRCs,
ECN-marked packets, CNPs and BECNs."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

CAPS = Path(__file__).resolve().parents[1] / "captures"
SCENARIOS = [
    p
    for p in sorted(CAPS.glob("*.toml"))
    if p.with_suffix(".pcap").exists() and tomllib.loads(p.read_text()).get("expect", {}).get("flow")
]


def _flows(pcap, jobs=1):
    r = run_ibwire("flows", pcap, "--format", "json", "-j", jobs)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["conversations"]


def _find(rows, qp):
    qpns = {f"0x{qp['src_qpn']:06x}", f"0x{qp['dst_qpn']:06x}"}
    hits = [
        r
        for r in rows
        if {r["qpn_a"], r["qpn_b"]} <= qpns | {None}
        and (r["qpn_a"] in qpns or r["qpn_b"] in qpns)
        and r["transport"] == qp["type"]
    ]
    assert len(hits) == 1, f"expected one conversation for QP {qp['name']}, found {len(hits)}"
    return hits[0]


@pytest.mark.parametrize("jobs", [1, 3], ids=["one-process", "conversations-shared-by-3"])
@pytest.mark.parametrize("toml", SCENARIOS, ids=lambda p: p.stem)
def test_flow_numbers_equal_scenario(toml, jobs):
    scen = tomllib.loads(toml.read_text())
    rows = _flows(toml.with_suffix(".pcap"), jobs)
    qps = {q["name"]: q for q in scen["qp"]}
    for name, want in scen["expect"]["flow"].items():
        row = _find(rows, qps[name])
        got = {
            "messages": sum(row["messages"].values()),
            "bytes": sum(row["message_bytes"].values()),
            "drops": row.get("drops", 0),
            "not_captured": row.get("not_captured", 0),
            "retransmits": row.get("retransmissions", 0),
            "naks_psn": (row.get("naks") or {}).get("PSN Sequence Error", 0),
            "rnr": row.get("rnr_naks", 0),
            "bad_icrc": row.get("bad_icrc", 0),
        }
        tries = [t for t in (row.get("retries_a"), row.get("retries_b")) if t]
        for cause in ("timeout", "nak", "rnr"):
            got[f"{cause}_retries"] = sum(t[f"{cause}_episodes"] for t in tries)
        got["gave_up_after"] = sum((t.get("gave_up") or {}).get("retries", 0) for t in tries)
        for k, v in want.items():
            assert got[k] == v, f"{toml.stem} flow {name}: {k} is {got[k]}, the scenario declares {v}"


def test_congestion_counts_equal_scenario():
    scen = tomllib.loads((CAPS / "congestion.toml").read_text())
    r = run_ibwire("stats", CAPS / "congestion.pcap", "--format", "json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["counters"]
    want = scen["expect"]["count"]
    assert (c["ecn_ce"], c["cnp"], c["becn"]) == (want["ecn_marked"], want["cnps"], want["becn"])
    rows = _flows(CAPS / "congestion.pcap")
    row = _find(rows, next(q for q in scen["qp"] if q["name"] == "x"))
    assert row["cnp_received_a"] + row["cnp_received_b"] == want["cnps"]
    assert row["ecn_ce"] == want["ecn_marked"]


def test_rc_latency_and_ack_coalescing_follow_the_scenario():
    """congestion.toml: 16 WRITEs of 4 packets, an ACK every 4 packets -> coalescing 4, depth ≤ 4."""
    rows = _flows(CAPS / "congestion.pcap")
    rc = [r for r in rows if r["transport"] == "RC"][0]
    assert rc["acks"] == 16 and rc["ack_coalescing"] == 4.0
    assert 1 <= rc["max_outstanding"] <= 4
    lat = rc["ack_latency_us"]
    assert lat["n"] == 64 and 0 < lat["p50"] <= lat["p99"] <= lat["max"]


@pytest.mark.parametrize(
    "toml", [p for p in sorted(CAPS.glob("*.toml")) if p.with_suffix(".pcap").exists()], ids=lambda p: p.stem
)
def test_qps_are_paired_as_declared(toml):
    """Each declared RC QP pair whose responder answers (tshark sees packets to the requester's QP: ACKs,
    responses or CNPs) is one conversation of `flows` with both QPNs, and `health` pairs its flows the same
    way: a responder's CNPs often come before its first ACK, and the two must not split the conversation."""
    scen = tomllib.loads(toml.read_text())
    out = subprocess.run(
        ["tshark", "-r", toml.with_suffix(".pcap"), "-T", "fields", "-e", "infiniband.bth.destqp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    answered = {int(v, 0) for v in out.split()}
    rows = _flows(toml.with_suffix(".pcap"))
    pairs = {frozenset((int(r["qpn_a"], 16), int(r["qpn_b"], 16))) for r in rows if r["qpn_a"] and r["qpn_b"]}
    rc = [q for q in scen.get("qp", []) if q.get("type") == "RC" and not q.get("silent") and "src_qpn" in q]
    for q in rc:
        _find(rows, q)
        if q["src_qpn"] in answered:
            assert frozenset((q["src_qpn"], q["dst_qpn"])) in pairs, f"{toml.stem}: QP {q['name']} not paired"
    r = run_ibwire("health", toml.with_suffix(".pcap"), "-T", "json")
    if r.returncode in (0, 1) and rc:
        for f in json.loads(r.stdout).get("congestion") or []:
            if f.get("partner_qp") is not None:
                assert frozenset((f["qp"], f["partner_qp"])) in pairs, f"{toml.stem}: health paired {f['flow']}"
