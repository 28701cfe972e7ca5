"""`ibwire audit --state` sources other than the capture: `ibwire fabric --format json` output, a sysfs tree laid
out as Linux Documentation/ABI/stable/sysfs-class-infiniband describes it (DEV/node_guid, DEV/ports/N/{lid,
gids/I, pkeys/I}; VFs bound on the host reached through the PCI device's virtfnK links, sysfs-bus-pci), and
several capture files of one incident audited together.  Expected drift comes from the policy the scenario
declares (its partitions.conf), never from our own earlier output."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ibwire.audit.policy import Port, load_policy
from ibwire.audit.state import from_sysfs

ROOT = Path(__file__).resolve().parents[1]
BREACH = ROOT / "captures" / "multitenant-breach"
IBWIRE = [str(Path(sys.executable).parent / "ibwire")]
VM1 = 0x0002C90300A1F000


def run(*args, ok=(0, 1)):
    out = subprocess.run([*IBWIRE, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert out.returncode in ok, out.stderr
    return out.stdout


def audit_json(*captures, state):
    return json.loads(
        run(
            "audit",
            *captures,
            "--policy",
            f"{BREACH}.partitions.conf",
            "--tenants",
            f"{BREACH}.tenants.toml",
            "--state",
            state,
            "--format",
            "json",
        )
    )


def drift(res):
    """port -> P_Keys the table has beyond the policy, for each pkey-drift finding."""
    out = {}
    for f in res["findings"]:
        if f["rule"] == "pkey-drift":
            extra = (
                f["description"].split("not in policy: ")[1].split(";")[0]
                if "not in policy" in f["description"]
                else ""
            )
            out[f["description"].split()[1]] = extra
    return out


@pytest.fixture(scope="module")
def fabric_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("state") / "state.json"
    path.write_text(run("fabric", f"{BREACH}.pcap", "--format", "json", ok=(0,)))
    return path


@pytest.fixture(scope="module")
def capture_audit():
    return audit_json(f"{BREACH}.pcap", state="capture")


def test_fabric_json_state_gives_the_capture_drift(fabric_json, capture_audit):
    from_json = drift(audit_json(f"{BREACH}.pcap", state=str(fabric_json)))
    from_capture = drift(capture_audit)
    assert from_capture, "the breach scenario declares a drifted table"
    for port, extra in from_capture.items():
        assert from_json.get(port) == extra
    # The fabric view keeps a table as last *written*, also by a SubnSet the master SM did not send: in this
    # scenario vm2 (LID 18, a VF) rewrote vm3's table in frame 215 and vm3 answered in frame 216.  The capture
    # observer counts only answers to the master SM, so only the JSON state reports vm3's table.
    doc = json.loads(fabric_json.read_text())
    for port in set(from_json) - set(from_capture):
        entry = next(p for p in doc["ports"] if p["guid"] == int(port, 16))
        assert entry["pkeys_last"] == "written" and entry["pkeys_frame"] == 216, port


def test_fabric_json_edited_table_is_drift(fabric_json, capture_audit, tmp_path):
    doc = json.loads(fabric_json.read_text())
    vm1 = next(p for p in doc["ports"] if p["guid"] == VM1)
    assert f"0x{VM1:016x}" not in drift(capture_audit)
    vm1["pkeys"].append(0x8005)  # a key no partition in the policy declares
    vm1["pkeys_last"] = vm1["pkeys_last"] or "read"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    found = drift(audit_json(f"{BREACH}.pcap", state=str(edited)))
    assert "0x8005" in found[f"0x{VM1:016x}"]


def test_fabric_json_rejects_other_json(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"nodes": []}')
    out = subprocess.run(
        [*IBWIRE, "audit", "--policy", f"{BREACH}.partitions.conf", "--state", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "ports" in out.stderr + out.stdout


def _gid(guid):
    g = f"{guid:016x}"
    return "fe80:0000:0000:0000:" + ":".join(g[i : i + 4] for i in range(0, 16, 4))


def _ib_dev(d: Path, node_guid: int, port_guid: int, lid: int, pkeys: list):
    g = f"{node_guid:016x}"
    (d / "ports" / "1" / "pkeys").mkdir(parents=True)
    (d / "ports" / "1" / "gids").mkdir()
    (d / "node_guid").write_text(":".join(g[i : i + 4] for i in range(0, 16, 4)) + "\n")
    (d / "ports" / "1" / "lid").write_text(f"0x{lid:x}\n")
    (d / "ports" / "1" / "gids" / "0").write_text(_gid(port_guid) + "\n")
    for i, pk in enumerate(pkeys + [0] * (16 - len(pkeys))):
        (d / "ports" / "1" / "pkeys" / str(i)).write_text(f"0x{pk:04x}\n")


def test_sysfs_state_drift(tmp_path):
    """PF mlx5_0 with VF 0 bound on the host (mlx5_2, vm1's GUID) and VF 1 passed to a VM (no IB device)."""
    policy = load_policy(f"{BREACH}.partitions.conf", False)
    want_vm1 = sorted(policy.expected_table(Port(VM1, "ca", False)))
    root = tmp_path / "sys"
    pf_pci, vf0_pci, vf1_pci = (
        root / "devices" / "pci0000:00" / n for n in ("0000:3b:00.0", "0000:3b:00.1", "0000:3b:00.2")
    )
    for d in (pf_pci, vf0_pci, vf1_pci):
        d.mkdir(parents=True)
    _ib_dev(pf_pci / "infiniband" / "mlx5_0", 0x0002C90300A10000, 0x0002C90300A10001, 0x10, [0xFFFF])
    _ib_dev(vf0_pci / "infiniband" / "mlx5_2", 0x0002C90300A1E000, VM1, 0x11, want_vm1 + [0x8005])
    cls = root / "class" / "infiniband"
    cls.mkdir(parents=True)
    (cls / "mlx5_0").symlink_to(pf_pci / "infiniband" / "mlx5_0")
    (pf_pci / "infiniband" / "mlx5_0" / "device").symlink_to(pf_pci)
    (pf_pci / "virtfn0").symlink_to(vf0_pci)
    (pf_pci / "virtfn1").symlink_to(vf1_pci)

    st = from_sysfs(str(root))
    assert st.ports[VM1].lid == 0x11 and st.ports[VM1].device == "mlx5_0 vf 0"
    assert sorted(st.ports[VM1].pkeys) == sorted(want_vm1 + [0x8005])
    assert any("vf 1" in s and "not in this host's sysfs" in s for s in st.sources)

    res = json.loads(
        run("audit", "--policy", f"{BREACH}.partitions.conf", "--state", f"sysfs:{root}", "--format", "json")
    )
    found = drift(res)
    assert "0x8005" in found[f"0x{VM1:016x}"]


def test_split_captures_audit_like_one(tmp_path, capture_audit):
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.fail("editcap (Debian package wireshark-common / tshark) is required")
    total = int(
        subprocess.run(["capinfos", "-Mc", f"{BREACH}.pcap"], capture_output=True, text=True)
        .stdout.split("Number of packets:")[1]
        .split()[0]
    )
    assert total > 10
    half = total // 2
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    subprocess.run([editcap, "-r", f"{BREACH}.pcap", a, f"1-{half}"], check=True)
    subprocess.run([editcap, "-r", f"{BREACH}.pcap", b, f"{half + 1}-{total}"], check=True)
    split = audit_json(a, b, state="capture")
    key = lambda r: sorted((f["rule"], f["severity"], f["description"], tuple(f["frames"])) for f in r["findings"])
    assert key(split) == key(capture_audit)
    assert split["verdict"] == capture_audit["verdict"]
