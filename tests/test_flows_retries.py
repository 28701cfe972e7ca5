"""Transport-failure forensics (IBA Vol 1 §9.7.6): `ibwire flows` tells timeout-driven retries from NAK- and
RNR-driven ones, estimates the local ACK timeout from the waits, and recognises a requester that gave up
(what NCCL reports as "transport retry counter exceeded"), against what the generator's scenarios declare
(the QP's retry_cnt and timeout_us, a receiver that drops everything)."""

import json
import tomllib
from functools import partial
from pathlib import Path

import conftest
import pyarrow.parquet as pq

run_ibwire = partial(conftest.run_ibwire, unwrapped=True)  # piped: cells and paragraphs stay whole


CAPS = Path(__file__).resolve().parents[1] / "captures"
TTR = 4.096e-6


def _row(pcap, qpn):
    r = run_ibwire("flows", CAPS / pcap, "--format", "json")
    assert r.returncode == 0, r.stderr
    (row,) = [c for c in json.loads(r.stdout)["conversations"] if qpn in (c["qpn_a"], c["qpn_b"])]
    return row


def test_unanswered_requester_gives_up_after_its_retry_count():
    for name, qp in (("roce-multitenant-breach", "x13"), ("multitenant-breach", "probe34")):
        scen = tomllib.loads((CAPS / f"{name}.toml").read_text())
        q = next(x for x in scen["qp"] if x["name"] == qp)
        row = _row(f"{name}.pcap", f"0x{q['dst_qpn']:06x}")
        (info,) = [t for t in (row["retries_a"], row["retries_b"]) if t]
        assert info["timeout_episodes"] == q["retry_cnt"] and info["nak_episodes"] == info["rnr_episodes"] == 0
        assert info["gave_up"]["retries"] == q["retry_cnt"] and info["gave_up"]["answers_after"] == 0
        wait = info["ack_timeout"]
        assert abs(wait["wait_us_min"] - q["timeout_us"]) < 1 and abs(wait["wait_us_max"] - q["timeout_us"]) < 1
        for e in range(wait["exponent_min"], wait["exponent_max"] + 1):  # the spec's Ttr <= wait <= 4 Ttr
            assert TTR * 2**e <= q["timeout_us"] * 1e-6 <= 4 * TTR * 2**e


def test_the_text_answers_the_retry_exceeded_question(tmp_path):
    r = run_ibwire("flows", CAPS / "roce-multitenant-breach.pcap")
    assert r.returncode == 0, r.stderr
    (para,) = [line for line in r.stdout.splitlines() if "retry counter exceeded" in line]
    assert "10.77.0.13" in para and "went silent" in para and "2 after no ACK or NAK" in para
    html = tmp_path / "flows.html"
    assert run_ibwire("flows", CAPS / "roce-multitenant-breach.pcap", "--report", html).returncode == 0
    assert "retry counter exceeded" in html.read_text()


def test_recovered_losses_are_nak_and_rnr_episodes_not_failures(tmp_path):
    want = tomllib.loads((CAPS / "loss-retransmit.toml").read_text())["expect"]["flow"]
    w, s = _row("loss-retransmit.pcap", "0x000d01"), _row("loss-retransmit.pcap", "0x000d02")
    assert w["retries_a"]["nak_episodes"] == want["w"]["naks_psn"] and "gave_up" not in w["retries_a"]
    assert s["retries_a"]["rnr_episodes"] == want["s"]["rnr"] and "gave_up" not in s["retries_a"]
    flows = tmp_path / "flows.parquet"
    r = run_ibwire("export", CAPS / "loss-retransmit.pcap", "-o", tmp_path / "x.parquet", "--flows", flows)
    assert r.returncode == 0, r.stderr
    rows = {t["qpn_b"]: t for t in pq.read_table(flows).to_pylist()}
    assert rows[0xD01]["retries_a"]["nak_episodes"] == want["w"]["naks_psn"]
    assert rows[0xD02]["retries_a"]["rnr_episodes"] == want["s"]["rnr"]
