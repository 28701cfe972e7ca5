"""`ibwire flows --report`: the page Chromium renders shows, per RC conversation, a PSN graph whose marks
equal the analysis's numbers and the scenario's declared faults; throughput over time adding up to the
packets analysed; latency histograms holding every latency sample; a ladder diagram with the CM handshake."""

import json
import tomllib
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from pictures_browser import render, self_contained

CAPS = Path(__file__).resolve().parents[1] / "captures"


@pytest.fixture(scope="module")
def loss(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flows-report")
    out = tmp / "flows.html"
    r = run_ibwire("flows", CAPS / "loss-retransmit.pcap", "--format", "json", "--report", out)
    assert r.returncode == 0, r.stderr
    return {"rows": json.loads(r.stdout)["conversations"], "html": out.read_text(), "page": render(out, tmp)}


def _marks(page, conv, kind):
    charts = [c for c in page["charts"] if c["cls"] == "chart psn" and c["section"] == str(conv)]
    got = [c["marks"].get(kind, {"n": 0, "inside": 0}) for c in charts]
    return sum(g["n"] for g in got), sum(g["inside"] for g in got)


def test_psn_graph_marks_equal_analysis_and_scenario(loss):
    page, rows = loss["page"], loss["rows"]
    want = tomllib.loads((CAPS / "loss-retransmit.toml").read_text())["expect"]["flow"]
    by_qpn = {r["qpn_a"]: r for r in rows}
    for name, qpn in (("w", "0x000c01"), ("s", "0x000c02")):
        r, truth = by_qpn[qpn], want[name]
        conv = r["conversation"]
        assert any(c["cls"] == "chart psn" and c["section"] == str(conv) and c["width"] > 300 for c in page["charts"])
        for kind, analysed, declared in (
            ("drop", r["drops"], truth["drops"]),
            ("retransmission", r["retransmissions"], truth["retransmits"]),
            ("nak", sum(r["naks"].values()), truth["naks_psn"]),
            ("rnr-nak", r["rnr_naks"], truth["rnr"]),
            ("rnr-wait", r["rnr_naks"], truth["rnr"]),
            ("bad-icrc", r["bad_icrc"], truth.get("bad_icrc", 0)),
        ):
            n, inside = _marks(page, conv, kind)
            assert n == inside == analysed == declared, (name, kind, n, inside, analysed, declared)
        requests, inside = _marks(page, conv, "request")
        assert requests == inside > 0


def test_throughput_over_time_adds_up_to_the_packets(loss):
    page, rows = loss["page"], loss["rows"]
    total = sum(r["packets_a_to_b"] + r["packets_b_to_a"] for r in rows)
    (packets,) = [c for c in page["charts"] if c["cls"] == "chart time packets" and c["data"]["scope"] == "total"]
    assert int(packets["data"]["sum"]) == total
    assert [name for name, _, _ in packets["lines"]] == ["all", "#1", "#2"]
    assert all(points > 2 and width > 100 for _, points, width in packets["lines"])
    for r in rows[:2]:
        (own,) = [
            c for c in page["charts"] if c["cls"] == "chart time packets" and c["section"] == str(r["conversation"])
        ]
        assert int(own["data"]["sum"]) == r["packets_a_to_b"] + r["packets_b_to_a"]
    assert any(c["cls"] == "chart time throughput" and c["data"]["scope"] == "total" for c in page["charts"])


def test_latency_histograms_hold_every_sample(loss):
    page, rows = loss["page"], loss["rows"]
    for r in rows[:2]:
        (h,) = [
            c
            for c in page["charts"]
            if c["cls"] == "chart histogram ack-latency" and c["section"] == str(r["conversation"])
        ]
        assert sum(n for n, _ in h["bars"]) == int(h["data"]["samples"]) == r["ack_latency_us"]["n"]
        assert all(height > 0 for _, height in h["bars"])


def test_report_is_self_contained(loss):
    assert self_contained(loss["html"])
    assert loss["page"]["title"] == "ibwire flows: loss-retransmit.pcap"


def test_ladder_draws_cm_handshake_and_chosen_pair(tmp_path):
    out = tmp_path / "mt.html"
    r = run_ibwire("flows", CAPS / "multitenant-breach.pcap", "--report", out, "--format", "json", "--ladder", "0x121")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["conversations"]
    page = render(out, tmp_path)
    (lad,) = [c for c in page["charts"] if c["cls"] == "chart ladder"]
    conv = next(x for x in rows if "0x000121" in (x["qpn_a"], x["qpn_b"]))
    assert lad["data"]["conversation"] == str(conv["conversation"])
    msgs = [g for g in lad["groups"] if g[0].startswith("msg")]
    cm = [t for t in lad["texts"] if t.startswith("CM ")]
    assert [t.split()[1] for t in cm[:3]] == ["CMReq", "CMRep", "CMRtu"]
    drawn = int(lad["data"]["packets"])
    assert drawn == min(conv["packets_a_to_b"] + conv["packets_b_to_a"], 48) and len(msgs) == drawn + len(cm)
    assert all(w > 300 for cls, _, w, *_ in msgs)
    reads = [x for x in rows if x.get("read_latency_us")]
    assert reads
    for x in reads:
        (h,) = [
            c
            for c in page["charts"]
            if c["cls"] == "chart histogram read-latency" and c["section"] == str(x["conversation"])
        ]
        assert sum(n for n, _ in h["bars"]) == x["read_latency_us"]["n"]


def test_report_errors_are_one_sentence(tmp_path):
    cap = CAPS / "loss-retransmit.pcap"
    r = run_ibwire("flows", cap, "--report", tmp_path / "no" / "such" / "dir.html")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    r = run_ibwire("flows", cap, "--report", tmp_path / "x.html", "--interval", "0")
    assert r.returncode == 2 and "interval" in r.stderr and not (tmp_path / "x.html").exists()
    assert list(tmp_path.iterdir()) == []  # no page, no part file left behind
    copy = tmp_path / "copy.pcap"
    copy.write_bytes(cap.read_bytes())
    r = run_ibwire("flows", copy, "--report", copy)
    assert r.returncode == 2 and copy.read_bytes() == cap.read_bytes() and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == [copy]
