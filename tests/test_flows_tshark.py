"""On the public captures, per-conversation message and payload-byte counts from `ibwire flows` agree
with counts an independent script derives from tshark's fields (header presence, lengths, padding)."""

import ipaddress
import json
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import run_ibwire

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "public"
CAPS = [
    "m3_02-2-write_ibdump_write.pcap",
    "m3_mlx_rocev1_test.pcap",
    "m3_nvme_host-echo_dump.pcap",
    "m3_nvme_nvme-discover.pcap",
    "m3_rdma-write-read_ibdump_read2.pcap",
    "oferby_proxy_roce.pcap",
]
# Header lengths from IBA Vol 1 §9.3 (independent of ibwire's tables)
EXT = {
    "infiniband.reth": 16,
    "infiniband.aeth": 4,
    "infiniband.immdt": 4,
    "infiniband.ieth": 4,
    "infiniband.deth": 8,
    "infiniband.atomiceth": 28,
    "infiniband.atomicacketh": 8,
    "infiniband.rdeth": 4,
}
# Request opcodes that complete a message: SEND Last/Only (+Imm/Inv), WRITE Last/Only (+Imm), READ Req, atomics
MESSAGE_END = {0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x13, 0x14, 0x16, 0x17}
FIELDS = [
    "ip.src",
    "ip.dst",
    "infiniband.grh.sgid",
    "infiniband.grh.dgid",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.padcnt",
    "udp.length",
    "infiniband.grh.paylen",
    "eth.type",
    *EXT,
]


def _addr(text):
    a = ipaddress.ip_address(text)
    return str(a.ipv4_mapped) if a.version == 6 and a.ipv4_mapped else str(a)


def tshark_halves(path):
    """(src, dst, destqp) -> [messages, payload bytes] from tshark alone."""
    args = ["tshark", "-r", str(path), "-d", "udp.port==69,infiniband", "-T", "fields", "-E", "occurrence=l"]
    for f in FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300).stdout
    halves = defaultdict(lambda: [0, 0])
    for line in out.splitlines():
        v = dict(zip(FIELDS, line.split("\t")))
        if not v["infiniband.bth.opcode"]:
            continue
        op = int(v["infiniband.bth.opcode"], 0)
        v1 = v["eth.type"] == "0x8915"
        src, dst = (v["infiniband.grh.sgid"], v["infiniband.grh.dgid"]) if v1 else (v["ip.src"], v["ip.dst"])
        ext = sum(n for f, n in EXT.items() if v[f])
        l4 = int(v["infiniband.grh.paylen"]) if v1 else int(v["udp.length"]) - 8
        payload = l4 - 12 - ext - int(v["infiniband.bth.padcnt"]) - 4
        h = halves[(_addr(src), _addr(dst), int(v["infiniband.bth.destqp"], 16))]
        if (op & 0x1F) in MESSAGE_END and op < 0x80 and (op >> 5) != 3 or (op >> 5) == 3:
            h[0] += 1
        h[1] += payload
    return halves


@pytest.mark.parametrize("name", CAPS)
def test_conversation_counts_match_tshark(name, tshark):
    path = PUBLIC / name
    ts = tshark_halves(path)
    r = run_ibwire("flows", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["conversations"]
    assert rows
    covered = set()
    for row in rows:
        qa = int(row["qpn_a"], 16) if row["qpn_a"] else None
        qb = int(row["qpn_b"], 16) if row["qpn_b"] else None
        if row["transport"] == "UD":
            keys = [k for k in ts if {k[0], k[1]} == {row["a"], row["b"]} and k[2] in (qa, qb)]
        else:
            keys = [k for k in ((row["a"], row["b"], qb), (row["b"], row["a"], qa)) if k in ts]
        assert keys, f"no tshark packets for conversation {row['a']}/{row['b']}"
        covered.update(keys)
        msgs = sum(ts[k][0] for k in keys)
        pay = sum(ts[k][1] for k in keys)
        assert sum(row["messages"].values()) == msgs, row
        assert row["payload_bytes"] == pay, row
    rc_keys = {k for k in ts if k[2] > 1}
    assert rc_keys <= covered, f"tshark sees conversations ibwire missed: {rc_keys - covered}"
