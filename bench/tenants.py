"""Benchmark: how `ibwire audit` grows with the number of tenants.

    .venv/bin/python bench/tenants.py [--tenants 100 500 2500] [--format text] [--link ib|roce]

For each N, `build` writes an N-tenant incident into bench/out/tenants-N/: partitions.conf (one partition
per tenant, two full-member hosts each, and the default partition), tenants.toml (the hosts by port GUID),
fabric.json (the programmed P_Key tables, `--state`) and a native-IB capture (LINKTYPE_INFINIBAND 247,
correct ICRC and VCRC) with RC SENDs inside every partition, plus the breaches a real fabric shows: every
100th tenant sends into the next one's partition, and every 250th port has a foreign P_Key programmed.
`--link roce`: the same on RoCEv2, tenants by MAC and IP (`build_roce`).  Then the audit runs once per N
in a process of its own; its wall time and peak RSS (VmHWM) are printed.
"""

import argparse
import json
import struct
import sys
from pathlib import Path

from dissectors.crc import icrc_ib, vcrc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_roce import Conn  # noqa: E402
from hostile import measure  # noqa: E402

GUID0 = 0x0002C90300000000
SM_GUID = GUID0 + 1


def guid(t: int, host: int) -> int:
    return GUID0 + 0x10000 + 2 * t + host


def lid(t: int, host: int) -> int:
    return 2 + 2 * t + host


def pkey(t: int) -> int:
    return 0x8001 + t


def packet(slid: int, dlid: int, pk: int, qp: int, psn: int) -> bytes:
    """An RC SEND Only (IBA 9.2) from `slid` to `dlid`, LRH without GRH, 32 bytes of payload."""
    payload = bytes(range(32))
    words = (8 + 12 + len(payload) + 4) // 4
    lrh = struct.pack(">BBHHH", 0x00, 0x02, dlid, words, slid)  # VL 0, LNH 2 (BTH follows)
    bth = struct.pack(">BBHI I", 0x04, 0x00, pk, qp, psn)
    pkt = lrh + bth + payload
    pkt += struct.pack("<I", icrc_ib(pkt))
    return pkt + struct.pack("<H", vcrc(pkt))


def build(out: Path, n: int) -> dict:
    """Write the N-tenant incident into `out`; the paths of its four files."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        k: out / name
        for k, name in (
            ("policy", "partitions.conf"),
            ("tenants", "tenants.toml"),
            ("state", "fabric.json"),
            ("capture", "traffic.pcap"),
        )
    }
    conf = ["Default=0x7fff : ALL=limited, SELF=full ;"]
    toml = []
    nodes = [{"guid": SM_GUID, "type": "CA", "description": "sm"}]
    ports = [
        {"guid": SM_GUID, "node_guid": SM_GUID, "port_num": 1, "lid": 1, "pkeys": [0xFFFF], "pkeys_last": "written"}
    ]
    for t in range(n):
        a, b = guid(t, 0), guid(t, 1)
        conf.append(f"t{t}=0x{pkey(t):04x} : 0x{a:016x}=full, 0x{b:016x}=full ;")
        toml.append(f'[tenants.t{t}]\nendpoints = [ {{ port_guid = "0x{a:016x}" }}, {{ port_guid = "0x{b:016x}" }} ]\n')
        for h, g in enumerate((a, b)):
            keys = [0x7FFF, pkey(t)]
            if (2 * t + h) % 250 == 249:
                keys.append(pkey((t + 1) % n))  # drift: a foreign partition programmed
            nodes.append({"guid": g, "type": "CA", "description": f"t{t}-host{h}"})
            ports.append(
                {"guid": g, "node_guid": g, "port_num": 1, "lid": lid(t, h), "pkeys": keys, "pkeys_last": "written"}
            )
    paths["policy"].write_text("\n".join(conf) + "\n")
    paths["tenants"].write_text("\n".join(toml))
    paths["state"].write_text(
        json.dumps(
            {
                "nodes": nodes,
                "ports": ports,
                "sm": {"master_lid": 1, "seen": [{"guid": SM_GUID, "state": "MASTER", "lid": 1, "frame": 1}]},
            }
        )
    )
    with open(paths["capture"], "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 247))
        sec = 1_700_000_000
        for t in range(n):
            pk = pkey(t)
            flows = [(lid(t, 0), lid(t, 1), pk), (lid(t, 1), lid(t, 0), pk)] * 2
            if t % 100 == 99:
                nxt = (t + 1) % n
                flows.append((lid(t, 0), lid(nxt, 0), pkey(nxt)))  # into the next tenant's partition
            for k, (s, d, p) in enumerate(flows):
                pkt = packet(s, d, p, 0x100 + t, k)
                f.write(struct.pack("<IIII", sec, t % 1_000_000, len(pkt), len(pkt)) + pkt)
    return paths


def build_roce(out: Path, n: int) -> dict:
    """The same incident on RoCEv2 (LINKTYPE_ETHERNET): tenants by MAC and IP, all in the default
    partition as RoCE deployments are (partitions.conf `ALL=full`), a SEND and its ACK within every tenant,
    every 100th tenant sending to the next one; no --state."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"policy": out / "partitions.conf", "tenants": out / "tenants.toml", "capture": out / "traffic.pcap"}

    def mac(t, h):
        return bytes([2, 0, t >> 8 & 0xFF, t & 0xFF, h, 1])

    def ip(t, h):
        return bytes([10, t >> 8 & 0xFF, t & 0xFF, 1 + h])

    toml = []
    with open(paths["capture"], "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for t in range(n):
            eps = ", ".join(
                f'{{ mac = "{mac(t, h).hex(":")}", ip = "{".".join(map(str, ip(t, h)))}/32" }}' for h in (0, 1)
            )
            toml.append(f"[tenants.t{t}]\nendpoints = [ {eps} ]\n")
            pair = [((t, 0), (t, 1))] + ([((t, 0), ((t + 1) % n, 0))] if t % 100 == 99 else [])
            for k, (a, b) in enumerate(pair):
                c = Conn(0)
                c.macs, c.ips = (mac(*a), mac(*b)), (ip(*a), ip(*b))
                pkts = [c.packet(0, 0x04, k, b"", bytes(32))] + ([] if k else [c.packet(1, 0x11, 0, bytes(4), b"")])
                for pkt in pkts:
                    f.write(struct.pack("<IIII", 1_700_000_000, t % 1_000_000, len(pkt), len(pkt)) + pkt)
    paths["policy"].write_text("Default=0x7fff : ALL=full ;\n")
    paths["tenants"].write_text("\n".join(toml))
    return paths


def run_audit(paths: dict, fmt: str) -> tuple:
    """(wall seconds, peak RSS in MiB, exit status, output lines) of one `ibwire audit` (bench/hostile.measure)."""
    state = ("--state", paths["state"]) if "state" in paths else ()
    status, out, _, peak, wall = measure(
        "audit", paths["capture"], "--policy", paths["policy"], "--tenants", paths["tenants"], *state, "--format", fmt
    )
    return wall, peak, status, out.count("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tenants", type=int, nargs="+", default=[100, 500, 2500])
    ap.add_argument("--format", default="text", choices=("text", "json", "md"))
    ap.add_argument("--link", default="ib", choices=("ib", "roce"))
    args = ap.parse_args()
    print(f"{'tenants':>8} {'packets':>8} {'wall s':>7} {'peak RSS MB':>12} {'exit':>5} {'lines':>7}")
    for n in args.tenants:
        out = HERE / "out" / f"tenants-{args.link}-{n}"
        paths = build(out, n) if args.link == "ib" else build_roce(out, n)
        wall, rss, status, lines = run_audit(paths, args.format)
        packets = (4 if args.link == "ib" else 2) * n + n // 100
        print(f"{n:>8} {packets:>8} {wall:>7.2f} {rss:>12} {status:>5} {lines:>7}")


if __name__ == "__main__":
    main()
