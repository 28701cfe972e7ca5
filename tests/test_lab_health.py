"""Issue 32, real traffic: RoCE with a set traffic class through a queue that marks ECN CE for real, in the RDMA
lab's guests (the session's lab of tests/test_lab_rdma.py, booted once; g0 and g1 are tenant A, VLAN 10).

g1 (the requester) runs `ib_write_bw --tclass=106` to g0, whose server side asks for the same class: DSCP 26 and
ECN ECT(0), since rxe copies the address vector's traffic class whole into the IPv4 TOS byte (rxe_net.c,
prepare_ipv4_hdr).  Both guests' VLAN devices map skb priority 0, which rxe leaves every packet at, to PCP 3
(`egress-qos-map 0:3`).  g1's NIC sends through a 20 Mbit/s token bucket whose queue is RED with `ecn nodrop`:
above its thresholds an ECT packet is marked CE, a packet that is not ECT (perftest's TCP exchange) is queued
unmarked, nothing is dropped.  `ibwire capture --vf 1` records g1's representor, after g1's queue.

Ground truth: RED's own counter of the packets it marked (`tc -s -j qdisc`), the class the command lines set,
the guests' rxe hw_counters, and perftest's QPNs.  rxe in Linux 6.1 has no congestion notification: no file of
drivers/infiniband/sw/rxe names ECN or CNP, the BTH FECN/BECN accessors of rxe_hdr.h are never called, the
opcode table (rxe_opcode.c) has no entry for the CNP opcode 0x81, and no hw_counter counts either.  So what
`ibwire health` must report here is every marked packet of the flow marked and never answered by a CNP.
"""

import json
import sys

import pytest
from test_lab_rdma import Capture, _qpn, check_capture, perftest

TCLASS = 106  # 26 << 2 | 0b10: DSCP 26, ECN ECT(0)
PCP = 3
RED = ["red", "limit", "1000000", "min", "8000", "max", "32000", "avpkt", "1000", "probability", "0.5"]
RED += ["bandwidth", "20mbit", "ecn", "nodrop"]
TBF = ["tbf", "rate", "20mbit", "burst", "4kb", "latency", "400ms"]


def _tc(rlab, nic: str) -> dict:
    """g1's qdiscs as tc reports them, by kind."""
    return {q["kind"]: q for q in json.loads(rlab.run("g1", "tc", "-s", "-j", "qdisc", "show", "dev", nic).stdout)}


def _set_classes(rlab, pcp: int):
    for g in ("g0", "g1"):
        v = next(v for v in rlab.desc["vfs"] if v["name"] == g)
        rlab.run(g, "ip", "link", "set", v["dev"], "type", "vlan", "egress-qos-map", f"0:{pcp}")


def _marked_run(rlab, path):
    """The write through the marking queue: (capture, client output, tc's qdiscs, rxe deltas)."""
    nic = rlab.desc["vfs"][1]["nic"]
    assert rlab.desc["vfs"][1]["dev"] != nic, "the lab's g1 must be in a VLAN (its PCP is under test)"
    before = {g: rlab.counters(g) for g in ("g0", "g1")}
    try:
        _set_classes(rlab, PCP)
        rlab.run("g1", "tc", "qdisc", "replace", "dev", nic, "root", "handle", "1:", *TBF)
        rlab.run("g1", "tc", "qdisc", "replace", "dev", nic, "parent", "1:1", "handle", "10:", *RED)
        with Capture(rlab, 1, path) as cap:
            # -u 20: a 4 s retransmission timeout; up to 128 writes of 4 KiB wait in g1's queue, 0.2 s at 20 Mbit/s
            client, _ = perftest(rlab, "ib_write_bw", "-s", "4096", f"--tclass={TCLASS}", "-u", "20", n=200)
        qdiscs = _tc(rlab, nic)
    finally:
        rlab.run("g1", "tc", "qdisc", "del", "dev", nic, "root", check=False)
        _set_classes(rlab, 0)
    after = {g: rlab.counters(g) for g in ("g0", "g1")}
    delta = {g: {k: after[g][k] - before[g].get(k, 0) for k in after[g]} for g in after}
    return cap, client, qdiscs, delta


@pytest.fixture(scope="module")
def marked(rlab, tmp_path_factory):
    path = tmp_path_factory.mktemp("ecn") / "rc-write-ecn.pcap"
    cap, client, qdiscs, delta = _marked_run(rlab, path)
    health = rlab.cli("health", str(path), "-T", "json", check=False)
    assert health.returncode == 1, health.stderr  # a CE-marked flow no CNP answers is an error
    red, d0, d1 = qdiscs["red"], delta["g0"], delta["g1"]
    print(
        f"\nRED marked {red['marked']} of the {red['packets']} packets it queued; rxe g1 sent {d1['sent_pkts']}, "
        f"g0 received {d0['rcvd_pkts']} and sent {d0['sent_pkts']}",
        file=sys.stderr,
    )
    return {
        "path": path,
        "cap": cap,
        "client": client,
        "qdiscs": qdiscs,
        "delta": delta,
        "health": json.loads(health.stdout),
        "g0": rlab.ip["g0"],
        "g1": rlab.ip["g1"],
    }


def test_red_marked_the_ect_packets_and_dropped_nothing(marked):
    """The queue marked packets and dropped none, the capture holds every frame g1's representor counted (every
    ICRC good: the ICRC does not cover the TOS byte), and rxe retransmitted nothing."""
    red, tbf = marked["qdiscs"]["red"], marked["qdiscs"]["tbf"]
    assert red["marked"] >= 1, red
    assert red["early"] == red["pdrop"] == red["other"] == red["drops"] == tbf["drops"] == 0, (red, tbf)
    check_capture(marked["cap"], marked["path"], tshark=False)
    d0, d1 = marked["delta"]["g0"], marked["delta"]["g1"]
    assert d1["sent_pkts"] == d0["rcvd_pkts"] >= 200 * 4, (d0, d1)  # 200 writes of four 1 KiB packets
    assert d0["out_of_seq_request"] == d0["duplicate_request"] == d1["completer_retry_err"] == 0, (d0, d1)


def test_health_counts_the_queues_marks_and_finds_them_never_answered(rlab, marked):
    """One congested flow, g1 to g0's QP, with exactly the packets RED marked and no CNP (rxe has none: the
    module's docstring); the one finding is `ce_unanswered`, and its filter selects exactly the marked frames."""
    h, red = marked["health"], marked["qdiscs"]["red"]
    d0, d1 = marked["delta"]["g0"], marked["delta"]["g1"]
    (flow,) = h["congestion"]
    assert (flow["src"], flow["dst"]) == (marked["g1"], marked["g0"]), flow
    assert flow["qp"] == _qpn(marked["client"], "remote") and flow["partner_qp"] == _qpn(marked["client"], "local")
    assert flow["ce_marked"] == red["marked"] and flow["cnps"] == 0 and flow["reactions"] == [], flow
    assert flow["packets"] == d1["sent_pkts"], (flow, d1)  # every packet g1's rxe sent is data of this flow
    (finding,) = h["findings"]
    assert finding["kind"] == "ce_unanswered" and finding["flow"] == flow["flow"], finding
    assert finding["frame_count"] == red["marked"], finding
    selected = rlab.cli("decode", str(marked["path"]), "-Y", finding["filter"]).stdout.splitlines()
    assert len(selected) == red["marked"], finding["filter"]
    # rxe counts nothing about congestion, and everything g0's rxe sent is an ACK: no CNP left it
    assert not [k for k in d0 if "cnp" in k or "ecn" in k], sorted(d0)
    back = [q for q in h["qos"] if q["src"] == marked["g0"]]
    assert {q["kind"] for q in back} == {"ACK"} and sum(q["packets"] for q in back) == d0["sent_pkts"], back


def test_qos_table_shows_the_class_the_run_set(rlab, marked):
    """Data and ACKs carry DSCP 26 (--tclass 106 >> 2) and PCP 3 (the VLAN devices' egress-qos-map), priority 3;
    `--qos` with that class finds nothing else, with another class a mismatch."""
    h, d0, d1 = marked["health"], marked["delta"]["g0"], marked["delta"]["g1"]
    rows = {(q["src"], q["kind"]): q for q in h["qos"]}
    assert set(rows) == {(marked["g1"], "data"), (marked["g0"], "ACK")}, h["qos"]
    for (src, _), q in rows.items():
        assert (q["dscp"], q["pcp"], q["priority"]) == (TCLASS >> 2, PCP, PCP), q
        assert q["packets"] == (d1 if src == marked["g1"] else d0)["sent_pkts"], (q, d0, d1)
    expect = f"dscp={TCLASS >> 2},pfc_priority={PCP}"
    right = json.loads(rlab.cli("health", str(marked["path"]), "-T", "json", "--qos", expect, check=False).stdout)
    assert [f["kind"] for f in right["findings"]] == ["ce_unanswered"], right["findings"]
    other = f"dscp={(TCLASS >> 2) + 1},pfc_priority={PCP + 1}"
    wrong = json.loads(rlab.cli("health", str(marked["path"]), "-T", "json", "--qos", other, check=False).stdout)
    assert {"qos_mismatch", "roce_unprotected"} <= {f["kind"] for f in wrong["findings"]}, wrong["findings"]
