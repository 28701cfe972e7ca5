"""RDMA devices, ports and SR-IOV VFs read from sysfs.

Layouts: Linux Documentation/ABI/stable/sysfs-class-infiniband (ports/N/{link_layer,state,rate,lid,gids},
counters) and sysfs-bus-pci (sriov_numvfs, virtfnN, physfn).  The root is configurable (parameter or
IBWIRE_SYSFS_ROOT) so tests can point it at a tree built in a temporary directory.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

SYSFS_ENV = "IBWIRE_SYSFS_ROOT"


def sysfs_root(root=None) -> Path:
    return Path(root or os.environ.get(SYSFS_ENV) or "/sys")


def read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


@dataclass
class Port:
    device: str
    num: int
    link_layer: str  # "InfiniBand" or "Ethernet"
    state: str  # "ACTIVE", "DOWN", ...
    phys_state: str
    rate: str
    lid: Optional[int]
    sm_lid: Optional[int]
    gids: List[str]
    netdev: Optional[str]
    path: Path

    @property
    def is_ib(self) -> bool:
        return self.link_layer.lower() == "infiniband"


@dataclass
class Vf:
    index: int
    bdf: str
    driver: Optional[str]  # mlx5_core when bound on the host, vfio-pci when passed to a VM
    ibdevs: List[str]
    netdevs: List[str]

    @property
    def bound_on_host(self) -> bool:
        return bool(self.ibdevs or self.netdevs)


@dataclass
class RdmaDevice:
    name: str
    node_guid: Optional[str]
    fw_ver: Optional[str]
    pci: Optional[str]
    ports: List[Port]
    netdevs: List[str]
    numvfs: Optional[int] = None
    totalvfs: Optional[int] = None
    vfs: List[Vf] = field(default_factory=list)
    is_vf: bool = False


def _state(text: Optional[str]) -> str:
    """sysfs writes states as '4: ACTIVE'."""
    return (text or "?").split(":", 1)[-1].strip()


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


def _names(d: Path) -> List[str]:
    try:
        return sorted(p.name for p in d.iterdir())
    except OSError:
        return []


def _gids(port_dir: Path) -> List[str]:
    out = []
    for name in sorted(_names(port_dir / "gids"), key=lambda s: int(s) if s.isdigit() else 0):
        g = read(port_dir / "gids" / name)
        if g and g.replace(":", "").strip("0"):
            out.append(g)
    return out


def _port_netdev(dev_dir: Path, port_dir: Path, num: int, netdevs: List[str]) -> Optional[str]:
    ndev = read(port_dir / "gid_attrs" / "ndevs" / "0")
    if ndev:
        return ndev
    for n in netdevs:  # dev_port is 0-based
        if _int(read(dev_dir / "device" / "net" / n / "dev_port")) in (num - 1, None):
            return n
    return None


def list_vfs(pci_dir: Path) -> List[Vf]:
    vfs = []
    for name in _names(pci_dir):
        if not name.startswith("virtfn") or not name[6:].isdigit():
            continue
        link = pci_dir / name
        try:
            bdf = os.path.basename(os.readlink(link))
        except OSError:
            bdf = "?"
        try:
            driver = os.path.basename(os.readlink(link / "driver"))
        except OSError:
            driver = None
        vfs.append(Vf(int(name[6:]), bdf, driver, _names(link / "infiniband"), _names(link / "net")))
    return sorted(vfs, key=lambda v: v.index)


def kernel_has_rdma(root=None) -> bool:
    r = sysfs_root(root)
    return (r / "class" / "infiniband").is_dir() or (r / "module" / "ib_core").is_dir()


def list_devices(root=None) -> List[RdmaDevice]:
    base = sysfs_root(root) / "class" / "infiniband"
    devices = []
    for name in _names(base):
        d = base / name
        netdevs = _names(d / "device" / "net")
        ports = []
        for pnum in sorted(_names(d / "ports"), key=lambda s: int(s) if s.isdigit() else 0):
            if not pnum.isdigit():
                continue
            pd = d / "ports" / pnum
            ports.append(
                Port(
                    name,
                    int(pnum),
                    read(pd / "link_layer") or "InfiniBand",
                    _state(read(pd / "state")),
                    _state(read(pd / "phys_state")),
                    read(pd / "rate") or "?",
                    _int(read(pd / "lid")),
                    _int(read(pd / "sm_lid")),
                    _gids(pd),
                    _port_netdev(d, pd, int(pnum), netdevs),
                    pd,
                )
            )
        pci_dir = d / "device"
        try:
            pci = os.path.basename(os.path.realpath(pci_dir)) if pci_dir.exists() else None
        except OSError:
            pci = None
        dev = RdmaDevice(
            name,
            read(d / "node_guid"),
            read(d / "fw_ver"),
            pci,
            ports,
            netdevs,
            _int(read(pci_dir / "sriov_numvfs")),
            _int(read(pci_dir / "sriov_totalvfs")),
            list_vfs(pci_dir),
            (pci_dir / "physfn").exists(),
        )
        devices.append(dev)
    return devices


def port_counters(port: Port) -> dict:
    """Packet and byte counters of a port (bytes: port_*_data counts 4-byte words, IBA 16.1.4)."""
    c = port.path / "counters"
    vals = {k: _int(read(c / k)) for k in ("port_xmit_packets", "port_rcv_packets", "port_xmit_data", "port_rcv_data")}
    if vals["port_xmit_packets"] is None and vals["port_rcv_packets"] is None:
        return {}
    return {
        "packets": (vals["port_xmit_packets"] or 0) + (vals["port_rcv_packets"] or 0),
        "bytes": 4 * ((vals["port_xmit_data"] or 0) + (vals["port_rcv_data"] or 0)),
    }
