"""`ibwire lab up --rdma`: tenant guests running rdma_rxe, their NICs taps on a VLAN-filtering bridge in a PF host
namespace, described for `ibwire capture --vf N` exactly like the namespace lab (ibwire.lab.topology).

    <prefix>-pf   network namespace of the PF host: the eswitch (bridge esw0 with the uplink p0, a veth, and
                  a bridge eswV per tenant VLAN V), taps pf0vf0..N-1 = the VF representors; QEMU runs inside it
    guest gN      QEMU (TCG or KVM), host root read-only over 9p, NIC MAC 02:1b:01:00:00:NN, rxe0 on it;
                  tenant VLAN V: the guest tags (eth0.V, address 10.(100+V/256).(V%256).(10+N)/24), the tap only
                  carries V; no VLAN: eth0, 10.78.0.(10+N)/24

The lab's files live in <run dir>/lab-<prefix>.d (kernel, initramfs, mailboxes, console logs); state.json there
is written before each thing is created, so `down` undoes a lab whose `up` was killed at any point.
"""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

from ibwire.capture.journal import _proc_start, run_dir
from ibwire.errors import UserError
from ibwire.files.outfile import output_file
from ibwire.lab.rdma import agent, boot
from ibwire.lab.topology import _sh, publish  # the lab's one runner of ip commands, its file writer

BRIDGE, UPLINK = "esw0", "p0"
MAX_MEMORY = 1024


def lab_file(prefix: str) -> Path:
    return run_dir() / f"lab-{prefix}.json"


def work_dir(prefix: str) -> Path:
    return run_dir() / f"lab-{prefix}.d"


def parse_tenants(specs: List[str], guests: int) -> List[tuple]:
    """--vlan TENANT=VID, one per guest in order, the list repeated when shorter: [(tenant, vid or None)]."""
    if not specs:
        return [("default", None)] * guests
    out = []
    for s in specs:
        name, sep, vid = s.partition("=")
        if not sep or not name or not vid.isdigit() or not 1 <= int(vid) <= 4094:
            raise UserError(f"--vlan takes TENANT=VID with VID 1..4094, not {s!r}")
        out.append((name, int(vid)))
    return [out[i % len(out)] for i in range(guests)]


def address(vid: Optional[int], index: int) -> str:
    return f"10.{100 + vid // 256}.{vid % 256}.{10 + index}" if vid else f"10.78.0.{10 + index}"


def describe(prefix: str, tenants: List[tuple]) -> dict:
    vfs = [
        {
            "name": f"g{i}",
            "index": i,
            "netns": None,
            "representor": f"pf0vf{i}",
            "mac": f"02:1b:01:00:00:{i:02x}",
            "ips": [address(vid, i)],
            "vlan": vid,
            "tenant": tenant,
        }
        for i, (tenant, vid) in enumerate(tenants)
    ]
    return {
        "name": prefix,
        "kind": "rdma",
        "pf_netns": f"{prefix}-pf",
        "uplink": UPLINK,
        "bridge": BRIDGE,
        "vfs": vfs,
        "prefixlen": 24,
        "vlan": None,
    }


def load(prefix: str) -> dict:
    try:
        return json.loads(lab_file(prefix).read_text())
    except (OSError, ValueError):
        raise UserError(f"the RDMA lab {prefix} is not up; run `ibwire lab up --rdma`") from None


def is_rdma(prefix: str) -> bool:
    return work_dir(prefix).exists()


class _State:
    """state.json: what exists so far (netns, QEMU pids with their start times)."""

    def __init__(self, wd: Path, prefix: str):
        self.path = wd / "state.json"
        self.doc = {"prefix": prefix, "netns": None, "qemu": []}

    def save(self):
        with output_file(self.path, "w") as f:
            f.write(json.dumps(self.doc))


def up(
    prefix: str, tenants: List[tuple], memory: int = 512, accel: str = "auto", timeout: float = 300, say=print
) -> dict:
    if os.geteuid() != 0:
        raise UserError("the RDMA lab needs root (it creates a network namespace, a bridge and taps)")
    if not 128 <= memory <= MAX_MEMORY:
        raise UserError(f"--memory is 128..{MAX_MEMORY} MiB per guest")
    boot.check_tools()
    kver, image = boot.find_kernel()
    acc, acc_args = boot.accelerator(accel)
    ns = f"{prefix}-pf"
    if is_rdma(prefix) or lab_file(prefix).exists() or ns in _namespaces():
        raise UserError(f"the lab {prefix} is already up; `ibwire lab down --prefix {prefix}` first")
    lab = describe(prefix, tenants)
    wd = work_dir(prefix)
    wd.mkdir(parents=True)
    state = _State(wd, prefix)
    state.save()
    try:
        t0 = time.monotonic()
        kernel, initrd = wd / "vmlinux", wd / "initramfs.gz"
        boot.extract_vmlinux(image, kernel)
        boot.build_initramfs(kver, initrd)
        share = wd / "share"
        share.mkdir()
        shutil.copy(agent.__file__, share / "agent.py")
        (share / "lab.json").write_text(json.dumps(lab))
        for v in lab["vfs"]:
            (share / v["name"]).mkdir()
        say(f"kernel {kver} ({acc}), initramfs built in {time.monotonic() - t0:.1f} s")
        state.doc["netns"] = ns
        state.save()
        _network(lab)
        start = lambda v: _start_guest(lab, v, wd, kernel, initrd, acc_args, memory, state)  # noqa: E731
        lab["boot_seconds"] = _boot_all(lab, wd, start, state, timeout)
        lab["accel"], lab["kernel"], lab["memory_mib"] = acc, kver, memory
    except BaseException:
        down(prefix)
        raise
    return publish(lab_file(prefix), lab)


def _namespaces() -> List[str]:
    r = _sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _network(lab: dict):
    """The eswitch: bridge esw0 joins the uplink and the representors of guests without a VLAN; bridge eswV joins
    the representors of VLAN V's guests, which tag their frames themselves.  (A bridge per VLAN, not one
    vlan_filtering bridge: kernels without CONFIG_BRIDGE_VLAN_FILTERING and 802.1Q devices, like this host's,
    have only this.)  Tenant VLANs stay inside the eswitch, guest to guest, as VF-to-VF traffic does."""
    ns = lab["pf_netns"]

    def nsx(*a):
        return _sh(["ip", "netns", "exec", ns] + list(a))

    _sh(["ip", "netns", "add", ns])
    for key in ("all", "default"):
        nsx("sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
    nsx("ip", "link", "set", "lo", "up")
    for vid in [None] + sorted({v["vlan"] for v in lab["vfs"] if v["vlan"]}):
        nsx("ip", "link", "add", "name", _bridge(vid), "type", "bridge", "stp_state", "0", "mcast_snooping", "0")
        nsx("ip", "link", "set", _bridge(vid), "multicast", "off", "up")
    nsx("ip", "link", "add", "name", UPLINK, "type", "veth", "peer", "name", UPLINK + "w")
    nsx("ip", "link", "set", UPLINK, "master", BRIDGE, "multicast", "off", "up")
    nsx("ip", "link", "set", UPLINK + "w", "multicast", "off", "up")
    for v in lab["vfs"]:
        nsx("ip", "tuntap", "add", "dev", v["representor"], "mode", "tap")
        join_vlan(lab, v, v["vlan"])


def _bridge(vid: Optional[int]) -> str:
    return f"esw{vid}" if vid else BRIDGE


def join_vlan(lab: dict, v: dict, vid: Optional[int]):
    """Put guest v's representor into VLAN vid's bridge (what `lab up --vlan` does; doing it again with another
    tenant's VLAN is the PF host operator's misconfiguration the audit must catch)."""
    _sh(
        [
            "ip",
            "netns",
            "exec",
            lab["pf_netns"],
            "ip",
            "link",
            "set",
            v["representor"],
            "master",
            _bridge(vid),
            "multicast",
            "off",
            "up",
        ]
    )


def _start_guest(lab, v, wd: Path, kernel: Path, initrd: Path, acc_args, memory, state) -> float:
    cmd = [
        "ip",
        "netns",
        "exec",
        lab["pf_netns"],
        boot.QEMU,
        "-name",
        f"ibwire-{lab['name']}-{v['name']}",
        *acc_args,
        "-smp",
        "1",
        "-m",
        str(memory),
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-serial",
        "stdio",
        "-bios",
        "/usr/share/qemu/qboot.rom",
        "-kernel",
        str(kernel),
        "-initrd",
        str(initrd),
        "-append",
        f"console=ttyS0 quiet loglevel=3 panic=-1 ibwg={v['index']}",
        "-virtfs",
        "local,path=/,mount_tag=ibwroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={wd / 'share'},mount_tag=ibwctl,security_model=none,multidevs=remap",
        "-netdev",
        f"tap,id=n0,ifname={v['representor']},script=no,downscript=no",
        "-device",
        f"virtio-net-pci,netdev=n0,mac={v['mac']}",
    ]
    if not os.path.exists("/usr/share/qemu/qboot.rom"):
        del cmd[cmd.index("-bios") : cmd.index("-bios") + 2]
    with open(wd / f"{v['name']}.console", "wb") as log:
        p = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    t = time.monotonic()
    state.doc["qemu"].append({"guest": v["name"], "pid": p.pid, "start": _proc_start(p.pid)})
    state.save()
    return t


def _boot_all(lab, wd: Path, start, state, timeout: float) -> Dict[str, float]:
    """Boot the guests, at most one per CPU at a time (TCG is CPU-bound: more at once only slows each one);
    returns each guest's seconds from QEMU's start to its agent's ready.json."""
    share = wd / "share"
    waiting = list(lab["vfs"])
    started: Dict[str, float] = {}
    pids: Dict[str, int] = {}
    took: Dict[str, float] = {}
    slots = max(1, os.cpu_count() or 1)
    deadline = time.monotonic() + timeout
    while len(took) < len(lab["vfs"]):
        while waiting and len(started) - len(took) < slots:
            v = waiting.pop(0)
            started[v["name"]] = start(v)
            pids[v["name"]] = state.doc["qemu"][-1]["pid"]
        for v in lab["vfs"]:
            name = v["name"]
            if name in took or name not in started:
                continue
            ready = share / name / "ready.json"
            if ready.exists():
                took[name] = round(time.monotonic() - started[name], 2)
                v.update(json.loads(ready.read_text()))
                continue
            failed = share / name / "failed.json"
            if failed.exists():
                raise UserError(f"guest {name} could not set up RDMA: {json.loads(failed.read_text())['error']}")
            if _reap(pids[name]) is not None:
                raise UserError(f"guest {name} stopped while booting: {_tail(wd / (name + '.console'))}")
        if time.monotonic() > deadline:
            raise UserError(
                f"guests not ready after {timeout:.0f} s: "
                f"{', '.join(v['name'] for v in lab['vfs'] if v['name'] not in took)}"
            )
        time.sleep(0.05)
    return took


def _reap(pid: int) -> Optional[int]:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None if _alive(pid) else 0
    return os.waitstatus_to_exitcode(status) if done else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no console output"
    return " | ".join(text[-lines:]) or "no console output"


def _qemu_pids(prefix: str) -> List[int]:
    """QEMU processes of this lab: those state.json recorded (same start time) and any inside its namespace."""
    pids = set()
    try:
        doc = json.loads((work_dir(prefix) / "state.json").read_text())
        pids |= {q["pid"] for q in doc["qemu"] if q["start"] and _proc_start(q["pid"]) == q["start"]}
    except (OSError, ValueError, KeyError):
        pass
    r = _sh(["ip", "netns", "pids", f"{prefix}-pf"], check=False)
    for tok in r.stdout.split():
        try:
            if os.path.basename(os.readlink(f"/proc/{tok}/exe")).startswith("qemu-system"):
                pids.add(int(tok))
        except (OSError, ValueError):
            pass
    return sorted(pids)


def down(prefix: str) -> List[str]:
    """Stop the guests, delete the namespace (taps, bridge, uplink go with it) and the lab's files."""
    gone = []
    pids = _qemu_pids(prefix)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    for pid in pids:
        while _alive(pid) and _reap(pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reap(pid)
    if pids:
        gone.append(f"{len(pids)} guests")
    ns = f"{prefix}-pf"
    if ns in _namespaces():
        _sh(["ip", "netns", "del", ns], check=False)
        gone.append(f"namespace {ns}")
    for lock in run_dir().glob(f"{ns}:*.lock"):  # capture's port locks of representors now gone
        lock.unlink(missing_ok=True)
    if work_dir(prefix).exists():
        shutil.rmtree(work_dir(prefix), ignore_errors=True)
        gone.append(str(work_dir(prefix)))
    try:
        lab_file(prefix).unlink()
    except OSError:
        pass
    return gone


def status(prefix: str) -> str:
    if not lab_file(prefix).exists():
        return f"RDMA lab {prefix} is coming up or half torn down; `ibwire lab down --prefix {prefix}` clears it"
    lab = load(prefix)
    alive = {
        q["guest"]: _alive(q["pid"]) and _proc_start(q["pid"]) == q["start"]
        for q in json.loads((work_dir(prefix) / "state.json").read_text())["qemu"]
    }
    lines = [
        f"RDMA lab {prefix} is up: PF host namespace {lab['pf_netns']}, bridge {lab['bridge']}, uplink "
        f"{lab['uplink']}; kernel {lab['kernel']} under {lab['accel'].upper()}, {lab['memory_mib']} MiB per guest"
    ]
    for v in lab["vfs"]:
        lines.append(
            f"  {v['name']:<4} tenant {v['tenant']:<8} VLAN {v['vlan'] or '-':<5} {v['mac']}  "
            f"{', '.join(v['ips']):<14} {v['rdma_dev']} on {v['dev']} (GID index {v['gid_index']})  "
            f"port {v['representor']}  {'running' if alive.get(v['name']) else 'STOPPED'}  "
            f"booted in {lab['boot_seconds'][v['name']]:.1f} s"
        )
    lines.append(
        f"run a command: ibwire lab run g0 -- ibv_devinfo; capture guest 1: ip netns exec {lab['pf_netns']} "
        f"ibwire capture --vf 1 -w g1.pcap"
    )
    return "\n".join(lines)
