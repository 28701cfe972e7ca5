"""Loss told apart from capture gaps (IBA Vol 1 §9.7.4): a request PSN the capture never shows is loss only
when the requester resends it (after a NAK or by go-back-N); one never resent reached the responder, which
went on, so the mirror or the capture missed it.  Checked on a real mirrored ConnectX capture against an
independent count from tshark's fields, and on the generator's sample whose scenario declares both kinds;
the report draws capture gaps grey and losses red."""

import json
import tomllib
from collections import defaultdict
from functools import partial
from pathlib import Path

import conftest
import one_process  # run_ibwire forked from a process that imported ibwire: the output is the point
import pytest
from conftest import PUBLIC
from pictures_browser import render

run_ibwire = partial(one_process.run_ibwire, unwrapped=True)  # piped: cells and paragraphs stay whole


CAPS = Path(__file__).resolve().parents[1] / "captures"


def _tshark_requests(pcap):
    """Per destination QP: the SEND/WRITE request PSNs in capture order, and the NAKs seen, from tshark."""
    fields = ("infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.aeth.syndrome")
    psns, naks = defaultdict(list), 0
    for op, qp, psn, syn in conftest.tshark_fields(pcap, *fields, first=True):
        if not op:
            continue
        op = int(op)
        if syn and (int(syn, 0) >> 5) & 3 == 3:
            naks += 1
        if op in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11):  # RC SEND and WRITE requests
            psns[int(qp, 0)].append(int(psn))
    return psns, naks


def test_mirror_gaps_on_a_real_capture_are_not_loss():
    pcap = PUBLIC / "m3_mlx_rocev1_test.pcap"
    psns, naks = _tshark_requests(pcap)
    assert naks == 0
    missing = {}
    for qp, seq in psns.items():
        assert len(seq) == len(set(seq)), "the capture resends nothing"
        span = {(p - seq[0]) & 0xFFFFFF for p in seq}
        missing[f"0x{qp:06x}"] = max(span) + 1 - len(span)
    assert sum(missing.values()) > 1000
    r = run_ibwire("flows", pcap, "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = [c for c in json.loads(r.stdout)["conversations"] if c["transport"] == "RC"]
    assert rows
    for c in rows:  # both ends send requests: each channel's missing PSNs count
        assert c["drops"] == 0 and c["retransmissions"] == 0
        assert c["not_captured"] == missing.get(c["qpn_a"], 0) + missing.get(c["qpn_b"], 0), c
    table = run_ibwire("flows", pcap)
    assert "not captured" in table.stdout and "drops" not in table.stdout


@pytest.fixture(scope="module")
def gap_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gap-report")
    out = tmp / "flows.html"
    r = run_ibwire("flows", CAPS / "capture-gap.pcap", "--format", "json", "--report", out)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["conversations"], render(out, tmp)


def test_report_draws_capture_gaps_grey_and_losses_red(gap_report):
    rows, page = gap_report
    truth = tomllib.loads((CAPS / "capture-gap.toml").read_text())["expect"]["flow"]["w"]
    (row,) = [r for r in rows if r["transport"] == "RC"]
    assert (row["drops"], row["not_captured"]) == (truth["drops"], truth["not_captured"])
    charts = [c for c in page["charts"] if c["cls"] == "chart psn" and c["section"] == str(row["conversation"])]
    marks = defaultdict(int)
    for c in charts:
        for kind in ("drop", "not-captured"):
            m = c["marks"].get(kind, {"n": 0, "inside": 0})
            assert m["n"] == m["inside"]
            marks[kind] += m["n"]
    assert marks == {"drop": truth["drops"], "not-captured": truth["not_captured"]}


def test_conversation_whose_every_icrc_fails_is_listed_with_the_reason():
    """Mellanox DC rping mirrored with rewritten headers: no frame's ICRC holds.  The conversation is listed,
    says why it was not sequenced, and --no-icrc sequences it (its WRITEs counted as tshark counts them)."""
    pcap = PUBLIC / "m3_rping_dc_dc-small.pcap"
    frames = [op for (op,) in conftest.tshark_fields(pcap, "infiniband.bth.opcode") if op]
    r = run_ibwire("flows", pcap, "--format", "json")
    (c,) = json.loads(r.stdout)["conversations"]
    assert c["bad_icrc"] == len(frames) and "fails its ICRC" in c["not_analysed"]
    assert "not analysed" in run_ibwire("flows", pcap).stdout
    (c,) = json.loads(run_ibwire("flows", pcap, "--format", "json", "--no-icrc").stdout)["conversations"]
    assert "not_analysed" not in c and c["transport"] == "DC"
    assert c["messages"] == {"write": sum(int(o) == 0x4A for o in frames)} and c["acks"] > 0


def test_each_kind_lists_its_frames_with_a_display_filter():
    """capture-gap.pcap, read with tshark: the frames right after PSNs that never appear are the capture gaps,
    the first sight of a PSN skipped earlier is the lost one resent, and every later repeat a retransmission;
    the listed filters select exactly those frames in tshark."""
    pcap = CAPS / "capture-gap.pcap"
    fields = ("frame.number", "infiniband.bth.destqp", "infiniband.bth.psn")
    rows = conftest.tshark_fields(pcap, *fields, display_filter="infiniband.bth.destqp == 0x000f01")
    rows = [tuple(int(x, 0) for x in row) for row in rows]
    every = {psn for _, _, psn in rows}
    top, seen, want = None, set(), defaultdict(list)
    for frame, _, psn in rows:
        if top is not None and psn > top + 1 and any(p not in every for p in range(top + 1, psn)):
            want["not_captured"].append(frame)
        if psn in seen:
            want["retransmission"].append(frame)
        elif top is not None and psn < top:
            want["lost"].append(frame)
            want["retransmission"].append(frame)
        seen.add(psn)
        top = psn if top is None else max(top, psn)
    r = run_ibwire("flows", pcap, "--format", "json")
    (row,) = [c for c in json.loads(r.stdout)["conversations"] if c["transport"] == "RC"]
    for kind in ("not_captured", "lost", "retransmission"):
        assert row["frames"][kind] == sorted(want[kind]), kind
        selected = conftest.tshark_fields(pcap, "frame.number", display_filter=row["wireshark"][kind])
        assert [int(f) for (f,) in selected] == sorted(want[kind])


def test_stats_counts_losses_apart_from_capture_gaps():
    """`stats` sums the sequenced conversations as the scenario declares them: the PSN the wire lost (resent
    after a NAK) apart from the PSNs only the capture missed."""
    want = tomllib.loads((CAPS / "capture-gap.toml").read_text())["expect"]["flow"]
    (seq,) = json.loads(run_ibwire("stats", CAPS / "capture-gap.pcap", "--format", "json").stdout)["rc_sequence"]
    assert seq["drops"] == sum(f.get("drops", 0) for f in want.values())
    assert seq["not_captured"] == sum(f.get("not_captured", 0) for f in want.values())
    assert seq["naks"] == sum(f.get("naks_psn", 0) for f in want.values())
    text = run_ibwire("stats", CAPS / "capture-gap.pcap").stdout
    assert "not captured" in text and "drops" in text
