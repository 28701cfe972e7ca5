"""`ibwire lab traffic SCENARIO`: replay the RoCEv2 frames of a capture between lab hosts.

SCENARIO is a pcap path, or a generator scenario file (.toml, `ibwire synth`), generated as RoCEv2 to a
temporary file first.  Each RoCEv2 packet (UDP port 4791, RoCE Annex A17) is rebuilt with the lab hosts' MACs and
IPv4 addresses (optionally in an 802.1Q tag) and its ICRC recomputed; the BTH and everything after it
are kept.  The capture's endpoints map onto lab hosts by `pairs` ("vf0-remote,vf2-vf1": endpoint A of
the conversation plays the first host, B the second, replayed once per pair) or by an explicit `mapping`
{capture IP: host}.  Frames are sent with AF_PACKET from inside each host's namespace; the command returns
only once every receiving host got all its frames, so nothing of the replay is still in flight afterwards.
"""

import ipaddress
import os
import struct
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

from dissectors.crc import icrc_roce2
from dissectors.numbers import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_QINQ,
    ETHERTYPE_VLAN,
    LINKTYPE_ETHERNET,
    ROCE_V2_PORT,
)
from ibwire.errors import UserError
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter

DEFAULT_PAIRS = "vf0-remote,vf2-remote,vf1-vf3,vf2-vf1"


def roce_packets(path: str) -> List[Tuple[str, str, int, bytes]]:
    """(src ip, dst ip, udp source port, bytes from BTH to the end) of every RoCEv2 frame in a capture."""
    out = []
    for fr in iter_frames(path):
        if fr.linktype != LINKTYPE_ETHERNET:
            continue
        d = fr.data
        off, et = 14, struct.unpack_from(">H", d, 12)[0] if len(d) >= 14 else 0
        while et in (ETHERTYPE_VLAN, ETHERTYPE_QINQ) and len(d) >= off + 4:
            et = struct.unpack_from(">H", d, off + 2)[0]
            off += 4
        if et == ETHERTYPE_IPV4 and len(d) >= off + 28:
            ihl = (d[off] & 0x0F) * 4
            total = struct.unpack_from(">H", d, off + 2)[0]
            src, dst = (
                str(ipaddress.ip_address(d[off + 12 : off + 16])),
                str(ipaddress.ip_address(d[off + 16 : off + 20])),
            )
            udp, end = off + ihl, off + total
        elif et == ETHERTYPE_IPV6 and len(d) >= off + 48:
            src, dst = (
                str(ipaddress.ip_address(d[off + 8 : off + 24])),
                str(ipaddress.ip_address(d[off + 24 : off + 40])),
            )
            if d[off + 6] != 17:
                continue
            udp, end = off + 40, off + 40 + struct.unpack_from(">H", d, off + 4)[0]
        else:
            continue
        if len(d) < udp + 8 + 12 or struct.unpack_from(">H", d, udp + 2)[0] != ROCE_V2_PORT:
            continue
        out.append((src, dst, struct.unpack_from(">H", d, udp)[0], bytes(d[udp + 8 : min(end, len(d))])))
    return out


def _ipv4(src: str, dst: str, payload_len: int, tos: int = 0) -> bytes:
    h = struct.pack(
        ">BBHHHBBH4s4s",
        0x45,
        tos,
        20 + payload_len,
        0,
        0x4000,
        64,
        17,
        0,
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    )
    s = sum(struct.unpack(">10H", h))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return h[:10] + struct.pack(">H", ~s & 0xFFFF) + h[12:]


def build_frame(src: dict, dst: dict, sport: int, roce: bytes) -> bytes:
    """Ethernet[/802.1Q]/IPv4/UDP 4791 + BTH..payload + fresh ICRC (little-endian, as dissectors.crc says)."""
    body = roce[:-4] if len(roce) >= 16 else roce
    udp_len = 8 + len(body) + 4
    ip = _ipv4(src["ips"][0], dst["ips"][0], udp_len)
    udp = struct.pack(">HHHH", sport, ROCE_V2_PORT, udp_len, 0)
    icrc = struct.pack("<I", icrc_roce2(ip + udp + body))
    eth = bytes.fromhex(dst["mac"].replace(":", "")) + bytes.fromhex(src["mac"].replace(":", ""))
    if src.get("vlan"):
        eth += struct.pack(">HH", ETHERTYPE_VLAN, src["vlan"])
    return eth + struct.pack(">H", ETHERTYPE_IPV4) + ip + udp + body + icrc


def write_burst(lab: dict, src: str, dst: str, n: int, path: str, distinct: int = 1000) -> str:
    """A pcap of n RoCEv2 RC SEND Only packets from lab host src to dst (for tcpreplay bursts): `distinct`
    packets with consecutive PSNs and 64 payload bytes, repeated."""
    hosts = {h["name"]: h for h in lab["vfs"] + [lab["remote"]]}
    frames = [
        build_frame(
            hosts[src], hosts[dst], 49152 + psn % 64, struct.pack(">BBHII", 0x04, 0x40, 0xFFFF, 0x11, psn) + bytes(68)
        )
        for psn in range(distinct)
    ]
    with PcapWriter(path, LINKTYPE_ETHERNET) as w:
        for i in range(n):
            w.write(frames[i % distinct], flush=False)
    return path


def plan(lab: dict, packets, pairs: Optional[str] = None, mapping: Optional[Dict[str, str]] = None):
    """[(sender host, receiver host, frame)] in replay order."""
    hosts = {h["name"]: h for h in lab["vfs"] + [lab["remote"]]}
    endpoints = []
    for s, d, _, _ in packets:
        for ip in (s, d):
            if ip not in endpoints:
                endpoints.append(ip)
    if not endpoints:
        raise UserError("the scenario has no RoCEv2 packets (UDP port 4791) to replay")
    maps = []
    if mapping:
        bad = [h for h in mapping.values() if h not in hosts]
        if bad:
            raise UserError(f"unknown lab host {bad[0]}; hosts are {', '.join(hosts)}")
        maps.append(mapping)
    elif len(endpoints) == 2:
        for pair in (pairs or DEFAULT_PAIRS).split(","):
            a, _, b = pair.strip().partition("-")
            if a not in hosts or b not in hosts or a == b:
                raise UserError(f"bad pair {pair!r}: use two different hosts of {', '.join(hosts)}")
            maps.append({endpoints[0]: a, endpoints[1]: b})
    else:
        names = [h["name"] for h in lab["vfs"]] + ["remote"]
        if len(endpoints) > len(names):
            raise UserError(
                f"the scenario has {len(endpoints)} endpoints but the lab only {len(names)} hosts; "
                f"give an explicit mapping"
            )
        maps.append({ip: names[i] for i, ip in enumerate(endpoints)})
    out = []
    for m in maps:
        for s, d, sport, roce in packets:
            if s in m and d in m:
                out.append((m[s], m[d], build_frame(hosts[m[s]], hosts[m[d]], sport, roce)))
    return out


def _scenario_pcap(scenario: str, tmp: str) -> str:
    if os.path.exists(scenario) and not scenario.endswith(".toml"):
        return scenario
    out = os.path.join(tmp, "scenario.pcap")
    r = subprocess.run(
        [sys.executable, "-c", "from ibwire.cli import main; main()", "synth", scenario, "-w", out, "--link", "roce2"],
        capture_output=True,
        text=True,
    )
    if r.returncode or not os.path.exists(out):
        raise UserError(
            f"{scenario} is neither a capture file nor a scenario `ibwire synth` could generate"
            + (f" ({r.stderr.strip().splitlines()[-1]})" if r.stderr.strip() else "")
        )
    return out


def replay(lab: dict, scenario: str, pairs: Optional[str] = None, mapping=None) -> dict:
    """Send the plan host by host; returns {host: frames sent}."""
    hosts = {h["name"]: h for h in lab["vfs"] + [lab["remote"]]}
    with tempfile.TemporaryDirectory(prefix="ibwire-lab-") as tmp:
        frames = plan(lab, roce_packets(_scenario_pcap(scenario, tmp)), pairs, mapping)
        by_host: Dict[str, List[bytes]] = {}
        expect = dict.fromkeys(hosts, 0)
        for h, d, f in frames:
            by_host.setdefault(h, []).append(f)
            expect[d] += 1
        receivers = {}
        try:
            for name, n in expect.items():  # receivers bind UDP 4791 so the kernel does not answer port unreachable
                if n:
                    receivers[name] = subprocess.Popen(
                        [
                            "ip",
                            "netns",
                            "exec",
                            hosts[name]["netns"],
                            sys.executable,
                            "-m",
                            "ibwire.lab.inject",
                            "--sink",
                            str(n),
                        ],
                        stdout=subprocess.PIPE,
                        text=True,
                    )
            for p in receivers.values():
                if p.stdout.readline().strip() != "ready":
                    raise UserError("a lab host could not open its RoCE port; is the lab up?")
            sent = {}
            for name, fl in by_host.items():
                path = os.path.join(tmp, f"{name}.pcap")
                with PcapWriter(path, LINKTYPE_ETHERNET) as w:
                    for f in fl:
                        w.write(f, flush=False)
                r = subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        hosts[name]["netns"],
                        sys.executable,
                        "-m",
                        "ibwire.lab.inject",
                        "eth0",
                        path,
                    ],
                    capture_output=True,
                    text=True,
                )
                if r.returncode:
                    raise UserError(f"sending from {name} failed: {r.stderr.strip()}")
                sent[name] = len(fl)
            for name, p in receivers.items():  # each sink exits once all its frames arrived
                got = p.stdout.readline().strip()
                if got != str(expect[name]):
                    raise UserError(
                        f"{name} received {got or 'no'} of the {expect[name]} frames sent to it; "
                        f"check the lab with `ibwire lab status`"
                    )
        finally:
            for p in receivers.values():
                try:
                    p.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    return sent
