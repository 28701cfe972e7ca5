"""Thin wrappers around the system tools capture relies on (iproute2, devlink, ethtool, mstconfig)."""

import json
import shutil
import subprocess
from typing import List, Optional


def which(tool: str) -> Optional[str]:
    return shutil.which(tool)


def run(cmd: List[str], timeout: float = 10) -> Optional[subprocess.CompletedProcess]:
    """Run a command and capture its text output; None when the tool is not installed or hangs."""
    if not which(cmd[0]):
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def run_json(cmd: List[str]):
    r = run(cmd)
    if r is None or r.returncode != 0 or not r.stdout.strip():
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def ip_link(dev: Optional[str] = None, stats: bool = False) -> list:
    """`ip [-s] -j link show [dev]`: list of link dicts (with vfinfo_list on a PF)."""
    cmd = ["ip"] + (["-s"] if stats else []) + ["-j", "link", "show"] + (["dev", dev] if dev else [])
    return run_json(cmd) or []


def link_stats(dev: str) -> dict:
    """rx/tx packets and bytes of a netdev from `ip -s -j link` (stats64)."""
    links = ip_link(dev, stats=True)
    if not links:
        return {}
    s = links[0].get("stats64") or links[0].get("stats") or {}
    rx, tx = s.get("rx", {}), s.get("tx", {})
    return {
        "rx_packets": rx.get("packets", 0),
        "tx_packets": tx.get("packets", 0),
        "rx_bytes": rx.get("bytes", 0),
        "tx_bytes": tx.get("bytes", 0),
        "rx_dropped": rx.get("dropped", 0),
    }


def ip_addrs(dev: str) -> List[str]:
    out = []
    for link in run_json(["ip", "-j", "addr", "show", "dev", dev]) or []:
        for a in link.get("addr_info", []):
            if a.get("scope") != "link" and a.get("local"):
                out.append(a["local"])
    return out


def neigh_ips(dev: str, mac: str) -> List[str]:
    """IP addresses the PF host has learned for a MAC (the VF's RoCE GIDs are its IPs)."""
    return [
        n["dst"]
        for n in run_json(["ip", "-j", "neigh", "show", "dev", dev]) or []
        if n.get("lladdr", "").lower() == mac.lower() and n.get("dst")
    ]


def ethtool_stats(dev: str) -> dict:
    r = run(["ethtool", "-S", dev])
    out = {}
    if r is None or r.returncode != 0:
        return out
    for line in r.stdout.splitlines():
        k, _, v = line.strip().partition(":")
        if v.strip().isdigit():
            out[k.strip()] = int(v)
    return out


def eswitch_mode(pci: str) -> Optional[str]:
    """'legacy' or 'switchdev' from `devlink dev eswitch show pci/BDF`, None when unknown."""
    j = run_json(["devlink", "-j", "dev", "eswitch", "show", f"pci/{pci}"])
    if not j:
        return None
    for v in (j.get("dev") or {}).values():
        return v.get("mode")
    return None


def devlink_ports() -> dict:
    return (run_json(["devlink", "-j", "port", "show"]) or {}).get("port", {})


def representors(pci: str) -> dict:
    """VF index -> representor netdev (devlink flavour pcivf) for a PF."""
    out = {}
    for name, p in devlink_ports().items():
        if name.startswith(f"pci/{pci}/") and p.get("flavour") == "pcivf" and "netdev" in p:
            out[int(p.get("vfnum", -1))] = p["netdev"]
    return out


def mstconfig_query(pci: str) -> dict:
    """LINK_TYPE_P*, SRIOV_EN and NUM_OF_VFS from `mstconfig -d BDF query` (read only)."""
    r = run(["mstconfig", "-d", pci, "query"], timeout=30)
    out = {}
    if r is None or r.returncode != 0:
        return out
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and (parts[0].startswith("LINK_TYPE_P") or parts[0] in ("SRIOV_EN", "NUM_OF_VFS")):
            out[parts[0]] = parts[1]
    return out


def has_cap_net_raw() -> bool:
    """CAP_NET_RAW is bit 13 of CapEff in /proc/self/status (as rdma-core tests/utils.py checks)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 13 & 1)
    except OSError:
        pass
    return False
