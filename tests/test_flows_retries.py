"""Transport-failure forensics (IBA Vol 1 §9.7.6): `ibwire flows` tells timeout-driven retries from NAK- and
RNR-driven ones, estimates the local ACK timeout from the waits, and recognises a requester that gave up
(what NCCL reports as "transport retry counter exceeded"), against what the generator's scenarios declare
(the QP's retry_cnt and timeout_us, a receiver that drops everything)."""

import json
import tomllib
from functools import partial
from pathlib import Path

import one_process  # run_ibwire forked from a process that imported ibwire: the output is the point
import pyarrow.parquet as pq

run_ibwire = partial(one_process.run_ibwire, unwrapped=True)  # piped: cells and paragraphs stay whole


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
        # the spec's Ttr <= wait <= 4 Ttr, with a timer allowed to fire up to 10% early (a tick, retries.EARLY)
        for e in range(wait["exponent_min"], wait["exponent_max"] + 1):
            assert 0.9 * TTR * 2**e <= q["timeout_us"] * 1e-6 <= 4 * TTR * 2**e
        assert any(TTR * 2**e <= q["timeout_us"] * 1e-6 for e in range(wait["exponent_min"], wait["exponent_max"] + 1))


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


RNR_GIVES_UP = """
[scenario]
name = "rnr-retry-exceeded"
link = "roce2"

[[port]]
name = "client"
guid = "0x0002c90300000a01"
lid = 0x0a
mac = "02:00:00:00:0a:01"
ip = "10.1.0.1"

[[port]]
name = "server"
guid = "0x0002c90300000b01"
lid = 0x0b
mac = "02:00:00:00:0b:01"
ip = "10.1.0.2"

[[qp]]
name = "s"
type = "RC"
src = "client"
dst = "server"
src_qpn = 0x000c02
dst_qpn = 0x000d02
rnr_retry = 3

[[op]]
qp = "s"
kind = "send"
size = 512
count = 2
at_us = 1000
interval_us = 1000      # no later SEND is under way when the requester gives up

[[fault]]
kind = "rnr"           # the receiver never posts a receive for message 2: it RNR-NAKs every try
qp = "s"
message = 2
timer = 1
times = 100

[expect.flow.s]
messages = 2
rnr = 4
rnr_retries = 3
gave_up_after = 3
"""


def test_rnr_retry_exceeded_is_told_apart_from_transport_retry_exceeded(tmp_path):
    """A receiver that never posts a receive: the requester resends its SEND after each RNR NAK, rnr_retry (3)
    times, then fails it with IBV_WC_RNR_RETRY_EXC_ERR (status 13), not status 12 (IBA §9.7.5.2.8)."""
    toml = tmp_path / "rnr.toml"
    toml.write_text(RNR_GIVES_UP)
    pcap = tmp_path / "rnr.pcap"
    r = run_ibwire("synth", toml, "-w", pcap)
    assert r.returncode == 0, r.stderr
    want = tomllib.loads(RNR_GIVES_UP)["expect"]["flow"]["s"]
    r = run_ibwire("flows", pcap, "--format", "json")
    assert r.returncode == 0, r.stderr
    (row,) = [c for c in json.loads(r.stdout)["conversations"] if c["transport"] == "RC"]
    info = row["retries_a"]
    assert row["rnr_naks"] == want["rnr"] and sum(row["messages"].values()) == want["messages"], row
    assert info["rnr_episodes"] == want["rnr_retries"] and info["timeout_episodes"] == info["nak_episodes"] == 0
    assert info["gave_up"]["retries"] == want["gave_up_after"] and info["gave_up"]["cause"] == "rnr", info
    text = " ".join(run_ibwire("flows", pcap).stdout.split())
    assert "RNR retry counter exceeded" in text and "status 13" in text and "status 12" not in text, text
