"""Builds a sysfs tree in a temporary directory (test data, not a mock): one ConnectX PF `mlx5_0` with
two VFs (VF 0 passed to a VM via vfio-pci, VF 1 bound on the host as mlx5_2), laid out like
/sys/class/infiniband and /sys/bus/pci/devices (Documentation/ABI/stable/sysfs-class-infiniband)."""

import os
from pathlib import Path


def standin_env(tmp: Path, link_layer: str = "InfiniBand", **more: str) -> dict:
    """The environment of an ibwire run against the stand-in executables beside this file, on the fake sysfs
    tree tmp/sys (built unless it exists): run files in tmp/run, the stand-ins' log in tmp/argv.log, and
    `more` (such as STANDIN_LIDS)."""
    root = tmp / "sys"
    if not root.exists():
        build(root, link_layer)
    return dict(
        os.environ,
        PATH=f"{Path(__file__).resolve().parent}:{os.environ['PATH']}",
        IBWIRE_SYSFS_ROOT=str(root),
        IBWIRE_RUN_DIR=str(tmp / "run"),
        STANDIN_LOG=str(tmp / "argv.log"),
        **more,
    )


def _w(p: Path, text: str):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")


def _port(d: Path, link_layer: str, lid: int, gid: str, xmit=100, rcv=200):
    _w(d / "link_layer", link_layer)
    _w(d / "state", "4: ACTIVE")
    _w(d / "phys_state", "5: LinkUp")
    _w(d / "rate", "100 Gb/sec (4X EDR)")
    _w(d / "lid", hex(lid))
    _w(d / "sm_lid", "0x1")
    _w(d / "gids" / "0", gid)
    _w(d / "gids" / "1", "0000:0000:0000:0000:0000:0000:0000:0000")
    for k, v in (("port_xmit_packets", xmit), ("port_rcv_packets", rcv), ("port_xmit_data", 0), ("port_rcv_data", 0)):
        _w(d / "counters" / k, str(v))


def build(root: Path, link_layer: str = "InfiniBand") -> Path:
    pci = root / "devices" / "pci0000:00"
    pf = pci / "0000:03:00.0"
    vfs = [pci / "0000:03:00.1", pci / "0000:03:00.2"]
    drivers = root / "bus" / "pci" / "drivers"
    for d in ("mlx5_core", "vfio-pci"):
        (drivers / d).mkdir(parents=True, exist_ok=True)
    _w(pf / "sriov_numvfs", "2")
    _w(pf / "sriov_totalvfs", "8")
    (pf / "net" / "ibp3s0").mkdir(parents=True)
    _w(pf / "net" / "ibp3s0" / "dev_port", "0")
    os.symlink(drivers / "mlx5_core", pf / "driver")
    for i, vf in enumerate(vfs):
        vf.mkdir(parents=True)
        os.symlink(pf, vf / "physfn")
        os.symlink(vf, pf / f"virtfn{i}")
        os.symlink(drivers / ("vfio-pci" if i == 0 else "mlx5_core"), vf / "driver")
    (vfs[1] / "infiniband" / "mlx5_2").mkdir(parents=True)
    ib = root / "class" / "infiniband"
    ib.mkdir(parents=True)
    for name, dev, lid, gid in (
        ("mlx5_0", pf, 0x3, "fe80:0000:0000:0000:0c42:a103:0011:2233"),
        ("mlx5_2", vfs[1], 0x12, "fe80:0000:0000:0000:0c42:a103:0011:9902"),
    ):
        d = root / "devices" / "virtual" / "infiniband" / name
        _w(d / "node_guid", "0c42:a103:0011:2233")
        _w(d / "fw_ver", "20.39.1002")
        os.symlink(dev, d / "device")
        _port(d / "ports" / "1", link_layer, lid, gid)
        os.symlink(d, ib / name)
    return root
