"""`ibwire stats` counts agree with counts taken from tshark's fields on every public capture, and its
JSON/CSV output is clean for scripts."""

import csv
import io
import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"
CAPTURES = sorted(PUBLIC.glob("*.pcap"))
FIELDS = [
    "infiniband.bth.opcode",
    "infiniband.bth.p_key",
    "ip.dsfield.ecn",
    "infiniband.mad.mgmtclass",
    "infiniband.mad.method",
    "infiniband.mad.attributeid",
    "frame.len",
    "infiniband.bth.destqp",
]


def tshark_counts(path):
    args = ["tshark", "-r", str(path), "-d", "udp.port==69,infiniband", "-T", "fields", "-E", "occurrence=f"]
    for f in FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300).stdout
    ops, pkeys, mads = Counter(), Counter(), Counter()
    ce = 0
    for line in out.splitlines():
        v = dict(zip(FIELDS, line.split("\t")))
        if not v["infiniband.bth.opcode"]:
            continue
        ops[int(v["infiniband.bth.opcode"])] += 1
        pkeys[int(v["infiniband.bth.p_key"])] += 1
        ce += v["ip.dsfield.ecn"] == "3"
        if v["infiniband.mad.mgmtclass"] and int(v["infiniband.bth.destqp"], 16) in (0, 1):
            mads[
                (
                    int(v["infiniband.mad.mgmtclass"], 0),
                    int(v["infiniband.mad.method"], 0),
                    int(v["infiniband.mad.attributeid"], 0),
                )
            ] += 1
    return ops, pkeys, ce, mads


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_stats_counts_match_tshark(path, tshark):
    ops, pkeys, ce, mads = tshark_counts(path)
    r = run_ibwire("stats", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert {row["opcode"]: row["packets"] for row in st["by_opcode"] if row["opcode"] is not None} == dict(ops)
    assert {int(row["p_key"], 16): row["packets"] for row in st["by_p_key"]} == dict(pkeys)
    assert st["counters"].get("ecn_ce", 0) == ce
    classes = {
        "SubnMgt LID-routed": 0x01,
        "SubnMgt directed-route": 0x81,
        "SubnAdm": 0x03,
        "PerfMgt": 0x04,
        "ComMgt": 0x07,
    }
    got = {
        (classes.get(m["class"]) or int(m["class"], 16), int(m["method"], 16), int(m["attribute"], 16)): m["packets"]
        for m in st["by_mad"]
    }
    assert got == dict(mads)
    assert st["summary"]["packets"] == int(
        subprocess.run(["capinfos", "-c", "-M", str(path)], capture_output=True, text=True).stdout.split()[-1]
    )


def test_crc_and_damage_counters_on_public_captures():
    st = json.loads(run_ibwire("stats", PUBLIC / "srinivas_infiniband.pcap", "--format", "json").stdout)
    assert st["counters"]["icrc_good"] == 43 and st["counters"]["vcrc_good"] == 43
    st = json.loads(
        run_ibwire("stats", PUBLIC / "m3_rping_uccl_uccl-mini_p2p-test2_rdma-nccl2.pcap", "--format", "json").stdout
    )
    assert st["counters"]["truncated"] == 489 and st["counters"]["icrc_truncated"] == 489
    assert any("snap length" in h for h in st["loss_hints"])
    st = json.loads(run_ibwire("stats", PUBLIC / "scapy_roce_uts_cnp_cx4lx.pcap", "--format", "json").stdout)
    assert (st["counters"]["cnp"], st["counters"]["becn"], st["counters"]["icrc_good"]) == (1, 1, 1)


def test_piped_output_is_clean_csv_and_json():
    path = PUBLIC / "m3_mlx_rocev1_test.pcap"
    r = run_ibwire("stats", path, "--format", "csv")
    assert r.returncode == 0 and r.stderr == "" and "\x1b[" not in r.stdout
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    ops = [x for x in rows if x["table"] == "by_opcode"]
    assert sum(int(x["packets"]) for x in ops) == 624
    r = run_ibwire("flows", path, "--format", "csv")
    assert r.returncode == 0 and r.stderr == ""
    assert len(list(csv.DictReader(io.StringIO(r.stdout)))) == len(
        json.loads(run_ibwire("flows", path, "--format", "json").stdout)["conversations"]
    )
    r = run_ibwire("stats", path)
    assert r.returncode == 0 and "by opcode" in r.stdout and "\x1b[" not in r.stdout


def test_flows_filter_qp_and_top():
    path = PUBLIC / "m3_mlx_rocev1_test.pcap"
    allrows = json.loads(run_ibwire("flows", path, "--format", "json").stdout)["conversations"]
    top = json.loads(run_ibwire("flows", path, "--format", "json", "--top", "3").stdout)["conversations"]
    assert top == allrows[:3]
    qp = allrows[0]["qpn_b"]
    one = json.loads(run_ibwire("flows", path, "--format", "json", "--qp", qp).stdout)["conversations"]
    assert one and all(qp in (r["qpn_a"], r["qpn_b"]) for r in one)
    v1 = json.loads(run_ibwire("flows", path, "--format", "json", "-Y", "grh and not udp").stdout)["conversations"]
    v2 = json.loads(run_ibwire("flows", path, "--format", "json", "-Y", "udp.dstport == 4791").stdout)["conversations"]
    total = lambda rows: sum(r["packets_a_to_b"] + r["packets_b_to_a"] for r in rows)  # noqa: E731
    assert total(v1) == 323 and total(v2) == 301 and total(allrows) == 624
    bad = run_ibwire("flows", path, "-Y", "bth.opcode ==")
    assert bad.returncode == 2 and "filter" in bad.stderr and "Traceback" not in bad.stderr
