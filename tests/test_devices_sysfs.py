"""`ibwire devices` on a sysfs tree built in a temporary directory, and on this machine (no RDMA)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "standin"))
import fake_sysfs  # noqa: E402

CLI = [sys.executable, "-c", "from ibwire.cli import main; main()", "devices"]


def _devices(root, *extra):
    env = dict(os.environ, IBWIRE_SYSFS_ROOT=str(root), PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    return subprocess.run(CLI + list(extra), env=env, capture_output=True, text=True, timeout=60)


def test_devices_lists_ports_vfs_and_backend_reasons(tmp_path):
    root = fake_sysfs.build(tmp_path / "sys", "InfiniBand")
    r = _devices(root)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "mlx5_0  pci 0000:03:00.0  fw 20.39.1002" in out
    assert "SR-IOV: 2 of 8 VFs enabled" in out
    assert "port 1: InfiniBand, ACTIVE (LinkUp), 100 Gb/sec (4X EDR), LID 0x3, netdev ibp3s0" in out
    assert "VF 0: 0000:03:00.1" in out and "not bound on host (driver vfio-pci" in out
    assert "VF 1: 0000:03:00.2" in out and "bound on host (mlx5_2)" in out
    assert "backend ibdump     cannot run: ibdump is not installed" in out
    assert "backend tc-mirror  cannot run: InfiniBand ports have no eswitch" in out
    assert "mlx5_2  pci 0000:03:00.2" in out and "(a VF bound on this host)" in out


def test_devices_json_and_ethernet_port(tmp_path):
    import json

    root = fake_sysfs.build(tmp_path / "sys", "Ethernet")
    r = _devices(root, "--json")
    inv = json.loads(r.stdout)
    port = inv["devices"][0]["ports"][0]
    assert port["link_layer"] == "Ethernet" and port["lid"] == 3
    assert port["backends"]["ibdump"] == "ibdump is not installed (MFT, DOCA-host or mstflint provide it)"
    assert [v["driver"] for v in inv["devices"][0]["vfs"]] == ["vfio-pci", "mlx5_core"]


def test_devices_without_rdma_is_one_sentence(tmp_path):
    (tmp_path / "empty").mkdir()
    r = _devices(tmp_path / "empty")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("No RDMA devices: this kernel has no RDMA support")


def test_names_read_from_sysfs_reach_the_terminal_escaped(tmp_path):
    """A firmware string (any sysfs text) holding a terminal escape is shown, never sent."""
    root = fake_sysfs.build(tmp_path / "sys", "InfiniBand")
    for fw in root.rglob("fw_ver"):
        fw.write_text("20.39\x1b]0;owned\x07\x1b[2J\n")
    r = _devices(root)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "20.39\\x1b]0;owned\\a\\x1b[2J" in r.stdout
