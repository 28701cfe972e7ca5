"""Resolve what to capture: `--pf/--vf/-i` -> device, port, link layer, representor and the VF's identities.

VF N of a PF: PCI `virtfnN` (sysfs-bus-pci); MAC/VLAN or node/port GUID from `ip -j link` vfinfo_list (keys
"address", "vlan_list", "node guid", "port guid"); representor from devlink (flavour pcivf, vfnum N);
IPs from the VF's own netdev when bound on the host, else the PF's neighbour table; LID from the VF's sysfs
port when bound, else `ibaddr -G <port guid>` (infiniband-diags).  The ibwire lab (ibwire.lab) describes its
VFs in a file under the run directory, used when this namespace is the lab's PF host.
"""

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from ibwire.capture import hostcmds, runfiles, sysfs
from ibwire.capture.identity import Identity
from ibwire.capture.journal import _netns_name, run_dir
from ibwire.errors import UserError


@dataclass
class Target:
    description: str
    device: Optional[str] = None  # RDMA device (mlx5_0) or None for the lab / plain netdev
    port: int = 1
    link_layer: str = "Ethernet"
    pci: Optional[str] = None
    vf: Optional[int] = None
    identity: Identity = field(default_factory=Identity)
    representor: Optional[str] = None
    uplink: Optional[str] = None
    peers: List[str] = field(default_factory=list)  # other eswitch ports: uplink and other representors
    eswitch: Optional[str] = None
    iface: Optional[str] = None
    lab: Optional[dict] = None
    sysfs_port: Optional[sysfs.Port] = None
    notes: List[str] = field(default_factory=list)

    @property
    def is_ib(self) -> bool:
        return self.link_layer.lower() == "infiniband"

    @property
    def lock_key(self) -> str:
        if self.device:
            return f"{self.device}:{self.port}"
        ns = (self.lab or {}).get("pf_netns") or _netns_name() or "root"
        return f"{ns}:{self.representor or self.iface}"


def lab_shape(lab) -> bool:
    """A lab description as `ibwire lab up` writes it (ibwire.lab.topology.describe), as far as capture reads it."""

    def host(h):
        return (
            isinstance(h, dict)
            and type(h.get("index", 0)) is int
            and isinstance(h.get("representor"), str)
            and isinstance(h.get("mac"), str)
            and isinstance(h.get("ips"), list)
            and all(isinstance(ip, str) for ip in h["ips"])
            and isinstance(h.get("vlan") or 0, int)
        )

    return (
        isinstance(lab, dict)
        and isinstance(lab.get("name"), str)
        and isinstance(lab.get("uplink"), str)
        and isinstance(lab.get("vfs"), list)
        and all(host(v) and "index" in v for v in lab["vfs"])
    )


def labs(directory=None) -> List[Tuple[Path, dict]]:
    """(path, description) of each lab-*.json in the run directory that is a JSON object, read as run-directory
    files are (no link followed, no FIFO waited on)."""
    d = run_dir(directory)
    dfd = runfiles.open_dir(d)
    out = []
    try:
        for name in sorted(n for n in os.listdir(dfd) if n.startswith("lab-") and n.endswith(".json")):
            try:
                lab = json.loads(runfiles.read(dfd, name))
            except (runfiles.Unreadable, ValueError, RecursionError):
                continue
            if isinstance(lab, dict):
                out.append((d / name, lab))
    finally:
        os.close(dfd)
    return out


def find_lab(directory=None) -> Optional[dict]:
    """The lab description whose PF host namespace is the one this process runs in (one of another shape is an
    error)."""
    here = _netns_name()
    for path, lab in labs(directory):
        if lab.get("pf_netns") == here:
            if not lab_shape(lab):
                raise UserError(
                    f"{path}: not a lab description as `ibwire lab up` writes it; take the lab down and up again"
                )
            return lab
    return None


def _lab_target(lab: dict, vf: Optional[int]) -> Target:
    if vf is None:
        return Target(f"lab uplink {lab['uplink']}", iface=lab["uplink"], lab=lab)
    vfs = {v["index"]: v for v in lab["vfs"]}
    if vf not in vfs:
        raise UserError(f"the lab has VFs {', '.join(map(str, sorted(vfs)))}; there is no VF {vf}")
    v = vfs[vf]
    ident = Identity(macs=[v["mac"]], vlans=[v["vlan"]] if v.get("vlan") else [], ips=list(v["ips"]))
    peers = [lab["uplink"]] + [o["representor"] for o in lab["vfs"] if o["index"] != vf]
    return Target(
        f"lab VF {vf} (representor {v['representor']})",
        vf=vf,
        identity=ident,
        representor=v["representor"],
        uplink=lab["uplink"],
        peers=peers,
        eswitch="switchdev",
        lab=lab,
    )


def _pick_pf(devices: List[sysfs.RdmaDevice], pf: Optional[str]) -> sysfs.RdmaDevice:
    if pf:
        for d in devices:
            if pf == d.name or pf in d.netdevs or pf == d.pci:
                return d
        raise UserError(f"no RDMA device or netdev named {pf}; `ibwire devices` lists them")
    pfs = [d for d in devices if not d.is_vf and (d.numvfs or 0) > 0]
    if len(pfs) == 1:
        return pfs[0]
    if not pfs:
        raise UserError("no PF with SR-IOV VFs enabled (sriov_numvfs is 0 everywhere); enable VFs or give --pf")
    raise UserError(f"several PFs have VFs ({', '.join(d.name for d in pfs)}); choose one with --pf")


def _vf_link_info(netdev: Optional[str], vf: int) -> dict:
    if not netdev:
        return {}
    for link in hostcmds.ip_link(netdev):
        for info in link.get("vfinfo_list", []):
            if info.get("vf") == vf:
                return info
    return {}


def _ibaddr_lid(port_guid: str) -> Optional[int]:
    r = hostcmds.run(["ibaddr", "-G", "0x" + port_guid.replace(":", "")])
    m = r and re.search(r"LID start (0x[0-9a-fA-F]+|\d+)", r.stdout)
    return int(m.group(1), 0) if m else None


def resolve(
    pf: Optional[str], vf: Optional[int], port: Optional[int] = None, iface: Optional[str] = None, root=None
) -> Target:
    """What `--pf/--vf/--port/-i` name as the capture target: a port of an RDMA device, one of its VFs, a plain
    interface, or the ibwire lab when this host has no RDMA device."""
    devices = sysfs.list_devices(root)
    if not devices:
        return _without_rdma(vf, iface, root)
    if iface and vf is None and not pf:
        return Target(f"interface {iface}", iface=iface)
    d = _pick_pf(devices, pf) if (pf or vf is not None) else devices[0]
    p = next((x for x in d.ports if x.num == (port or 1)), None)
    if p is None:
        raise UserError(f"{d.name} has no port {port}")
    netdev = p.netdev or (d.netdevs[0] if d.netdevs else None)
    t = Target(
        f"{d.name} port {p.num}",
        device=d.name,
        port=p.num,
        link_layer=p.link_layer,
        pci=d.pci,
        sysfs_port=p,
        uplink=netdev,
        iface=iface,
    )
    t.eswitch = hostcmds.eswitch_mode(d.pci) if d.pci and not p.is_ib else None
    if vf is None:
        t.identity = Identity(lids=[p.lid] if p.lid else [], gids=list(p.gids))
        return t
    vfo = next((v for v in d.vfs if v.index == vf), None)
    if vfo is None:
        raise UserError(f"{d.name} has {d.numvfs or 0} VFs; VF {vf} does not exist")
    t.vf = vf
    t.description = f"{d.name} port {p.num} VF {vf} ({vfo.bdf})"
    t.identity = _vf_identity(devices, p, vfo, _vf_link_info(netdev, vf), netdev, t.notes)
    if not p.is_ib and d.pci:
        reps = hostcmds.representors(d.pci)
        t.representor = reps.get(vf)
        t.peers = ([netdev] if netdev else []) + [r for i, r in reps.items() if i != vf]
    return t


def _without_rdma(vf: Optional[int], iface: Optional[str], root) -> Target:
    """No RDMA device here: the lab when this is its PF host namespace, else the interface -i names."""
    lab = find_lab()
    if lab and not iface:
        t = _lab_target(lab, vf)
        t.notes.append(f"no RDMA device here; using the ibwire lab {lab['name']}")
        return t
    if iface and vf is None:
        return Target(f"interface {iface}", iface=iface)
    why = "this kernel has no RDMA support" if not sysfs.kernel_has_rdma(root) else "no RDMA device is present"
    raise UserError(
        f"{why}; capture a kernel interface with -i IFACE --backend netdev, or run `ibwire lab up` "
        f"and capture from its PF namespace"
    )


def _vf_identity(
    devices: List[sysfs.RdmaDevice], p: sysfs.Port, vfo: sysfs.Vf, info: dict, netdev: Optional[str], notes: List[str]
) -> Identity:
    """What tells VF `vfo`'s packets apart on port `p`: from `ip link` vfinfo (`info`), its own RDMA device and
    netdevs when bound on the host, the PF's neighbour table, and on InfiniBand the SA (notes say how)."""
    ident = Identity()
    if p.is_ib:
        ident.node_guid, ident.port_guid = info.get("node guid"), info.get("port guid")
    else:
        mac = info.get("address")
        if mac and mac != "00:00:00:00:00:00":
            ident.macs.append(mac)
        for v in info.get("vlan_list", []) or ([{"vlan": info["vlan"]}] if info.get("vlan") else []):
            if v.get("vlan"):
                ident.vlans.append(v["vlan"])
    for ibdev in vfo.ibdevs:  # bound on the host: read its own port
        for vd in devices:
            if vd.name == ibdev and vd.ports:
                vp = vd.ports[0]
                if vp.lid:
                    ident.lids.append(vp.lid)
                ident.gids += vp.gids
    for nd in vfo.netdevs:
        ident.ips += hostcmds.ip_addrs(nd)
        if not ident.macs and not p.is_ib:
            ident.macs += [l.get("address") for l in hostcmds.ip_link(nd) if l.get("address")]
    if netdev and ident.macs and not ident.ips:
        ident.ips += hostcmds.neigh_ips(netdev, ident.macs[0])
    if p.is_ib and not ident.lids and ident.port_guid:
        lid = _ibaddr_lid(ident.port_guid)
        if lid:
            ident.lids.append(lid)
        notes.append(
            "VF LID from ibaddr (SA query)"
            if lid
            else "could not learn the VF's LID (ibaddr -G port_guid failed); filtering on GIDs only"
        )
        if not ident.gids:
            ident.gids.append("fe80::" + ":".join(ident.port_guid.replace(":", "")[i : i + 4] for i in range(0, 16, 4)))
    return ident
