"""`ibwire lab up|down|status`: the namespaces, veth pairs and bridge that play a ConnectX in switchdev mode.

    <prefix>-vfN   eth0 (VF N netdev, MAC 02:1b:00:00:0N:02, 10.77.0.1N)  <-veth->  pf0vfN in <prefix>-pf
    <prefix>-remote eth0 (02:1b:00:00:ff:02, 10.77.0.100)                <-veth->  p0     in <prefix>-pf
    <prefix>-pf    bridge esw0 joins p0 and pf0vf0..3 (the eswitch FDB, static entries, no flooding)

The host-side ends pf0vfN behave like VF representors: what VF N sends arrives on pf0vfN's ingress.
Neighbours are static, IPv6 and multicast are off so the only traffic is what `lab traffic` sends.  With --vlan V the
hosts talk over eth0.V.  The description is written to <run dir>/lab-<prefix>.json for `ibwire capture`.
"""

import json
import subprocess
from typing import List, Optional

from ibwire.capture import journal
from ibwire.capture.journal import run_dir
from ibwire.errors import UserError
from ibwire.files.outfile import output_file

NUM_VFS = 4
SUBNET = "10.77.0"


def _sh(args: List[str], check=True) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise UserError(f"{args[0]} is not installed; the lab needs iproute2") from None
    if check and r.returncode:
        raise UserError(f"lab setup failed at `{' '.join(args)}`: {r.stderr.strip()}")
    return r


def _ns(ns: str, *args: str, check=True):
    return _sh(["ip", "netns", "exec", ns] + list(args), check)


def describe(prefix: str = "ibwlab", vlan: Optional[int] = None) -> dict:
    hosts = [
        {
            "name": f"vf{i}",
            "index": i,
            "netns": f"{prefix}-vf{i}",
            "representor": f"pf0vf{i}",
            "mac": f"02:1b:00:00:{i:02x}:02",
            "ips": [f"{SUBNET}.{10 + i}"],
            "vlan": vlan,
        }
        for i in range(NUM_VFS)
    ]
    remote = {
        "name": "remote",
        "netns": f"{prefix}-remote",
        "representor": "p0",
        "mac": "02:1b:00:00:ff:02",
        "ips": [f"{SUBNET}.100"],
        "vlan": vlan,
    }
    return {
        "name": prefix,
        "pf_netns": f"{prefix}-pf",
        "uplink": "p0",
        "bridge": "esw0",
        "vfs": hosts,
        "remote": remote,
        "vlan": vlan,
    }


def publish(path, lab: dict) -> dict:
    """Write a lab's description whole (capture reads lab-*.json: it never sees half of one)."""
    with output_file(path, "w") as f:
        f.write(json.dumps(lab, indent=1))
    return lab


def lab_file(prefix: str):
    return run_dir() / f"lab-{prefix}.json"


def load(prefix: str = "ibwlab") -> dict:
    try:
        return json.loads(lab_file(prefix).read_text())
    except (OSError, ValueError):
        raise UserError(f"the lab {prefix} is not up; run `ibwire lab up`") from None


def namespaces() -> List[str]:
    r = _sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def up(prefix: str = "ibwlab", vlan: Optional[int] = None) -> dict:
    if f"{prefix}-pf" in namespaces():
        raise UserError(f"the lab {prefix} is already up; `ibwire lab down` first")
    lab = describe(prefix, vlan)
    try:
        _build(lab)
    except BaseException:
        down(prefix)
        raise
    return publish(lab_file(prefix), lab)


def _quiet(ns: str):
    for key in ("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"):
        _ns(ns, "sysctl", "-q", "-w", key)


def _build(lab: dict):
    pf = lab["pf_netns"]
    hosts = lab["vfs"] + [lab["remote"]]
    for ns in [pf] + [h["netns"] for h in hosts]:
        _sh(["ip", "netns", "add", ns])
        _quiet(ns)
        _ns(ns, "ip", "link", "set", "lo", "up")
    _ns(pf, "ip", "link", "add", "name", lab["bridge"], "type", "bridge", "stp_state", "0", "mcast_snooping", "0")
    _ns(pf, "ip", "link", "set", lab["bridge"], "multicast", "off", "up")  # no IGMP reports from the bridge
    for h in hosts:
        rep = h["representor"]
        _ns(pf, "ip", "link", "add", "name", rep, "type", "veth", "peer", "name", "eth0", "netns", h["netns"])
        _ns(pf, "ip", "link", "set", rep, "master", lab["bridge"])
        _ns(pf, "bridge", "link", "set", "dev", rep, "learning", "off", "flood", "off", "mcast_flood", "off")
        _ns(pf, "ip", "link", "set", rep, "multicast", "off", "up")
        _ns(h["netns"], "ip", "link", "set", "eth0", "address", h["mac"], "multicast", "off", "up")
        dev = "eth0"
        if h.get("vlan"):
            dev = f"eth0.{h['vlan']}"
            _ns(h["netns"], "ip", "link", "add", "link", "eth0", "name", dev, "type", "vlan", "id", str(h["vlan"]))
            _ns(h["netns"], "ip", "link", "set", dev, "up")
            _ns(
                pf,
                "bridge",
                "fdb",
                "add",
                h["mac"],
                "dev",
                rep,
                "master",
                "static",
                "vlan",
                str(h["vlan"]),
                check=False,
            )
        _ns(pf, "bridge", "fdb", "add", h["mac"], "dev", rep, "master", "static")
        for ip in h["ips"]:
            _ns(h["netns"], "ip", "addr", "add", f"{ip}/24", "dev", dev)
        h["dev"] = dev
    if lab.get("vlan"):
        _ns(pf, "ip", "link", "set", lab["bridge"], "type", "bridge", "vlan_filtering", "0")
    for h in hosts:
        for o in hosts:
            if o is not h:
                for ip in o["ips"]:
                    _ns(
                        h["netns"],
                        "ip",
                        "neigh",
                        "replace",
                        ip,
                        "lladdr",
                        o["mac"],
                        "dev",
                        h["dev"],
                        "nud",
                        "permanent",
                    )


def stop_captures(prefix: str = "ibwlab", force: bool = False):
    """Before a lab goes down: refuse while a capture runs inside any of its namespaces, unless forced; then the
    captures are stopped first, as Ctrl-C would, so they disarm and close their files."""
    live = journal.running([ns for ns in namespaces() if ns.startswith(prefix + "-")])
    if live and not force:
        raise UserError(
            f"{'; '.join(c[2] for c in live)} runs inside the lab {prefix}; stop it first, or give "
            f"--force to stop it and take the lab down"
        )
    for pid, start, _ in live:
        journal.stop_process(pid, start, grace=30.0)


def down(prefix: str = "ibwlab") -> List[str]:
    gone = []
    for ns in namespaces():
        if ns == f"{prefix}-pf" or ns == f"{prefix}-remote" or ns.startswith(f"{prefix}-vf"):
            _sh(["ip", "netns", "del", ns], check=False)
            gone.append(ns)
    try:
        lab_file(prefix).unlink()
    except OSError:
        pass
    return gone


def status(prefix: str = "ibwlab") -> str:
    present = [ns for ns in namespaces() if ns.startswith(prefix + "-")]
    if not present:
        return f"lab {prefix} is down"
    lab = load(prefix)
    lines = [
        f"lab {prefix} is up: PF host namespace {lab['pf_netns']}, uplink {lab['uplink']}"
        + (f", VLAN {lab['vlan']}" if lab.get("vlan") else "")
    ]
    for h in lab["vfs"] + [lab["remote"]]:
        alive = "up" if h["netns"] in present else "MISSING"
        lines.append(
            f"  {h['name']:<7} netns {h['netns']:<16} {h['mac']}  {', '.join(h['ips']):<12} "
            f"port {h['representor']:<7} {alive}"
        )
    lines.append(f"capture a VF with: ip netns exec {lab['pf_netns']} ibwire capture --vf 2 -w vf2.pcap")
    return "\n".join(lines)
