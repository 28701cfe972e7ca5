"""End to end on real network namespaces, veth, tc and dumpcap: `ibwire lab` plays a ConnectX in switchdev mode,
tcpreplay (Debian tcpreplay) sends bursts at top speed through a VF, and `ibwire capture --vf N` must capture
exactly that VF's packets, all of them, and leave no qdisc, filter, monitor interface or engine behind — after
a normal stop, a SIGKILL plus `--cleanup` (with a damaged journal too), a full disk, a vanished interface, a
dead engine, and with two captures of different VFs running at once."""

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibwire.files import iter_frames
from ibwire.lab import topology, traffic

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared/captures/public"
SCENARIO = str(PUBLIC / "m3_nvme_nvme-discover.pcap")
PREFIX = f"ibwt{os.getpid() % 100000}"
CLI = [sys.executable, "-c", "from ibwire.cli import main; main()"]
MAC = {i: f"02:1b:00:00:{i:02x}:02" for i in range(4)}
BURST = 200_000


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    env = dict(os.environ, IBWIRE_RUN_DIR=str(run))
    try:
        r = subprocess.run(CLI + ["lab", "up", "--prefix", PREFIX], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        yield env
    finally:
        _stop_and_clean_up(env, STARTED)
        subprocess.run(CLI + ["lab", "down", "--prefix", PREFIX, "--force"], env=env, capture_output=True)
        for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
            if ns.startswith(PREFIX + "-"):
                subprocess.run(["ip", "netns", "del", ns.split()[0]])


def _stop_and_clean_up(env, procs):
    """Stop captures still running as Ctrl-C does (SIGKILL if that fails), then undo what any of them left."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    subprocess.run(CLI + ["capture", "--cleanup"], env=env, capture_output=True)


@pytest.fixture(autouse=True)
def _no_capture_outlives_its_test(lab):
    """Issue 33: a test that fails mid-capture must not leave its capture running (the next tests would find
    the VF 'already being captured'): what it started is stopped and cleaned up when it ends, failed or not."""
    first = len(STARTED)
    yield
    if len(STARTED) > first:
        _stop_and_clean_up(lab, STARTED[first:])


@pytest.fixture(scope="module")
def burst(tmp_path_factory):
    """A pcap of BURST RoCEv2 packets from VF 2 to the remote host."""
    path = tmp_path_factory.mktemp("burst") / "burst.pcap"
    traffic.write_burst(topology.describe(PREFIX), "vf2", "remote", BURST, str(path))
    return path


def _pf(*args):
    return subprocess.run(["ip", "netns", "exec", f"{PREFIX}-pf"] + list(args), capture_output=True, text=True)


def _vf_packets(vf: int) -> int:
    r = subprocess.run(
        ["ip", "netns", "exec", f"{PREFIX}-vf{vf}", "ip", "-s", "-j", "link", "show", "eth0"],
        capture_output=True,
        text=True,
    )
    s = json.loads(r.stdout)[0]["stats64"]
    return s["rx"]["packets"] + s["tx"]["packets"]


def _armed():
    """Everything a capture could leave in the PF namespace, and dumpcap processes anywhere."""
    qdiscs = _pf("tc", "qdisc", "show").stdout
    filters = "".join(
        _pf("tc", "filter", "show", "dev", d, "ingress").stdout for d in ("p0", "pf0vf0", "pf0vf1", "pf0vf2", "pf0vf3")
    )
    links = _pf("ip", "-br", "link").stdout
    return "clsact" in qdiscs, filters.strip(), "ibwmon" in links, " ".join(_engines())


def _engines():
    """dumpcap processes running in the lab's PF namespace."""
    ns = os.stat(f"/run/netns/{PREFIX}-pf").st_ino
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == ns and open(f"/proc/{pid}/comm").read().strip() == "dumpcap":
                out.append(pid)
        except OSError:
            pass
    return out


NOTHING = (False, "", False, "")
STARTED = []  # every process a test started, stopped when the lab goes (a failed test must not leave one)


def _start(env, *args, stdout=None):
    p = subprocess.Popen(
        ["ip", "netns", "exec", f"{PREFIX}-pf"] + CLI + ["capture", *map(str, args)],
        env=env,
        stderr=subprocess.PIPE,
        stdout=stdout,
        text=stdout is None,
    )
    STARTED.append(p)
    lines = []
    for line in p.stderr:
        line = line if isinstance(line, str) else line.decode()
        lines.append(line)
        if line.startswith("ibwire: capturing "):  # armed, counters read, engine writing: traffic may start
            return p, lines
    raise AssertionError("capture did not start: " + "".join(lines))


def _finish(p, lines, sig=signal.SIGINT):
    if sig:
        p.send_signal(sig)
    rest = p.stderr.read()
    err = "".join(lines) + (rest if isinstance(rest, str) else rest.decode())
    return p.wait(timeout=60), err


def _traffic(env, pairs=None):
    r = subprocess.run(
        CLI + ["lab", "traffic", SCENARIO, "--prefix", PREFIX] + (["--pairs", pairs] if pairs else []),
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr  # returns once every receiver got all its frames: nothing in flight


def _replay(pcap, vf=2, limit=None):
    """tcpreplay a pcap at top speed from VF vf's netdev."""
    r = subprocess.run(
        ["ip", "netns", "exec", f"{PREFIX}-vf{vf}", "tcpreplay", "--topspeed", "-i", "eth0"]
        + (["-L", str(limit)] if limit else [])
        + [str(pcap)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _macs(path) -> set:
    return {(f.data[0:6].hex(":"), f.data[6:12].hex(":")) for f in iter_frames(str(path))}


def test_tc_mirror_captures_all_and_only_vf2_then_leaves_nothing(lab, tmp_path):
    out = tmp_path / "vf2.pcap"
    before = _vf_packets(2)
    p, lines = _start(lab, "--vf", 2, "-w", out)
    assert "clsact" in _pf("tc", "qdisc", "show", "dev", "pf0vf2").stdout
    _traffic(lab)
    rc, err = _finish(p, lines)
    assert rc == 130 and "stopped by Ctrl-C" in err, err  # Ctrl-C's status, one line on what was left
    sent_and_received = _vf_packets(2) - before
    frames = list(iter_frames(str(out)))
    assert sent_and_received > 50
    assert len(frames) == sent_and_received  # all of them
    assert all(MAC[2] in pair for pair in _macs(out))  # only VF 2's
    assert f"captured {sent_and_received} of {sent_and_received} packets" in err and "backend drops: 0" in err
    tshark = subprocess.run(["tshark", "-r", str(out), "-Y", "infiniband.bth"], capture_output=True, text=True)
    assert len(tshark.stdout.splitlines()) == len(frames)  # every frame is a RoCEv2 packet
    assert out.read_bytes()[:4] == struct.pack("<I", 0xA1B23C4D)  # pcap with the kernel's nanoseconds
    assert _armed() == NOTHING


def test_200k_packet_burst_at_top_speed_is_captured_without_a_drop(lab, tmp_path, burst):
    out = tmp_path / "burst.pcapng"
    before = _vf_packets(2)
    p, lines = _start(lab, "--vf", 2, "-w", out)
    assert "filter 'ether host 02:1b:00:00:02:02" in "".join(lines)  # the VF selection runs in the kernel
    sent = _replay(burst)
    rc, err = _finish(p, lines)
    assert rc == 130 and "stopped by Ctrl-C" in err, err  # Ctrl-C's status, one line on what was left
    counted = _vf_packets(2) - before
    info = subprocess.run(["capinfos", "-M", "-c", "-I", str(out)], capture_output=True, text=True).stdout
    captured = int(info.split("Number of packets:")[1].split()[0])
    assert f"Actual: {BURST} packets" in sent and counted >= BURST
    assert captured == counted, err  # every packet, as the VF counted
    assert f"captured {counted:,} of {counted:,} packets" in err and "backend drops: 0" in err
    assert "Time precision = nanoseconds" in info  # kernel ns timestamps
    assert _armed() == NOTHING


def test_stdout_count_snaplen_and_extra_filter(lab, burst):
    p, lines = _start(
        lab,
        "--vf",
        2,
        "--write",
        "-",
        "--count",
        1000,
        "--snapshot-length",
        60,
        "--filter",
        "udp dst port 4791",
        stdout=subprocess.PIPE,
    )
    _replay(burst, limit=5000)
    data = p.stdout.read()
    rc, err = _finish(p, lines, sig=None)  # -c ends it by itself
    assert rc == 0, err
    assert struct.unpack_from("<I", data)[0] == 0xA1B23C4D  # a nanosecond pcap stream on stdout
    off, n = 24, 0
    while off < len(data):
        incl, orig = struct.unpack_from("<II", data, off + 8)
        assert incl == 60 < orig
        off += 16 + incl
        n += 1
    assert n == 1000
    assert _armed() == NOTHING


def test_two_captures_of_different_vfs_of_one_pf_each_get_all_their_packets(lab, tmp_path):
    before = {vf: _vf_packets(vf) for vf in (1, 2)}
    p1, l1 = _start(lab, "--vf", 1, "-w", tmp_path / "vf1.pcap")
    p2, l2 = _start(lab, "--vf", 2, "-w", tmp_path / "vf2.pcap")
    _traffic(lab, pairs="vf2-vf1,vf1-remote,vf2-remote")
    rc2, err2 = _finish(p2, l2)  # the first to stop must not take the other's qdiscs with it
    assert _armed()[:3] == (True, _armed()[1], True) and "ibwmon" in _pf("ip", "-br", "link").stdout
    rc1, err1 = _finish(p1, l1)
    assert rc1 == rc2 == 130, err1 + err2  # both stopped by Ctrl-C
    for vf, err in ((1, err1), (2, err2)):
        n = _vf_packets(vf) - before[vf]
        out = tmp_path / f"vf{vf}.pcap"
        assert n > 50 and len(list(iter_frames(str(out)))) == n, err
        assert all(MAC[vf] in pair for pair in _macs(out))
    both = {pair for pair in _macs(tmp_path / "vf1.pcap") if MAC[2] in pair}
    assert both and both <= _macs(tmp_path / "vf2.pcap")  # VF 2 <-> VF 1 is in both captures
    assert _armed() == NOTHING


def _journal(lab):
    return next(Path(lab["IBWIRE_RUN_DIR"]).glob("capture-*.json"))


def test_sigkill_then_cleanup_by_marks_with_a_damaged_journal(lab, tmp_path):
    p, _ = _start(lab, "--vf", 2, "-w", tmp_path / "k.pcap")
    second = subprocess.run(
        ["ip", "netns", "exec", f"{PREFIX}-pf"] + CLI + ["capture", "--vf", "2", "-w", str(tmp_path / "second.pcap")],
        env=lab,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert second.returncode == 2 and "already being captured" in second.stderr
    journal = _journal(lab)
    p.kill()
    p.wait()
    qdisc, filters, monitor, engine = _armed()
    assert qdisc and "mirred" in filters and monitor and engine  # a killed capture leaves these
    journal.write_text('{"pid": 12')  # and its journal is damaged
    r = subprocess.run(CLI + ["capture", "--cleanup"], env=lab, capture_output=True, text=True)  # from the root ns
    assert r.returncode == 0 and "found by their marks" in r.stdout and "damaged journal" in r.stdout, r.stderr
    assert _armed() == NOTHING
    assert not list(Path(lab["IBWIRE_RUN_DIR"]).glob("capture-*.json"))
    assert len(list(iter_frames(str(tmp_path / "k.pcap")))) == 0  # the engine closed its file cleanly


def test_cleanup_never_removes_the_damaged_journal_of_a_running_capture(lab, tmp_path):
    p, lines = _start(lab, "--vf", 3, "-w", tmp_path / "live.pcap")
    journal = _journal(lab)
    journal.write_text("garbage")
    r = subprocess.run(CLI + ["capture", "--cleanup"], env=lab, capture_output=True, text=True)
    assert r.returncode == 0 and "still running" in r.stdout, r.stdout
    assert journal.exists() and _armed()[0] and "mirred" in _armed()[1]
    rc, err = _finish(p, lines)
    assert rc == 130 and "stopped by Ctrl-C" in err, err  # Ctrl-C's status, one line on what was left
    assert _armed() == NOTHING


def test_netdev_rotation_by_the_engine(lab, tmp_path, burst):
    out = tmp_path / "up.pcap"
    p, lines = _start(lab, "-i", "p0", "-w", out, "-C", 0.1, "-W", 3)
    _replay(burst, limit=5000)
    rc, err = _finish(p, lines)
    assert rc == 130 and "stopped by Ctrl-C" in err, err  # Ctrl-C's status, one line on what was left
    files = sorted(tmp_path.glob("up_*.pcap"))  # as dumpcap names a ring: up_NNNNN_TIME.pcap
    assert len(files) == 3 and all(re.fullmatch(r"up_\d{5}_\d{14}\.pcap", f.name) for f in files), files
    assert all(f.stat().st_size <= 100_000 and len(list(iter_frames(str(f)))) > 0 for f in files)
    kept = sum(len(list(iter_frames(str(f)))) for f in files)
    assert f"{kept:,} packets kept in {', '.join(map(str, files))}, a valid capture" in err, err


def test_full_disk_stops_disarms_and_keeps_a_valid_file(lab, tmp_path, burst):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)], check=True)
    try:
        p, lines = _start(lab, "--vf", 2, "-w", small / "x.pcap")
        _replay(burst, limit=5000)  # ~700 kB: does not fit
        rc, err = _finish(p, lines, sig=None)  # the capture ends by itself
        assert rc == 1 and "is full" in err and "Traceback" not in err, err
        assert _armed() == NOTHING
        r = subprocess.run(["tshark", "-r", str(small / "x.pcap")], capture_output=True, text=True)
        assert r.returncode == 0 and "cut short" not in r.stderr and len(r.stdout.splitlines()) > 1000
    finally:
        subprocess.run(["umount", str(small)])


def test_vanished_interface_and_dead_engine_end_with_one_sentence(lab, tmp_path):
    _pf("ip", "link", "add", "ibwtmp0", "type", "veth", "peer", "name", "ibwtmp1")
    _pf("ip", "link", "set", "ibwtmp1", "up")
    p, lines = _start(lab, "-i", "ibwtmp1", "--backend", "netdev", "-w", tmp_path / "v.pcap")
    _pf("ip", "link", "del", "ibwtmp0")
    rc, err = _finish(p, lines, sig=None)
    assert rc == 1 and "interface ibwtmp1 vanished" in err and "Traceback" not in err, err

    p, lines = _start(lab, "--vf", 0, "-w", tmp_path / "d.pcap")
    doc = json.loads(_journal(lab).read_text())
    engine = next(e["pid"] for e in doc["entries"] if e["what"] == "dumpcap process")
    os.kill(engine, signal.SIGKILL)
    rc, err = _finish(p, lines, sig=None)
    assert rc == 1 and "dumpcap died (SIGKILL)" in err and "Traceback" not in err, err
    assert _armed() == NOTHING
    assert subprocess.run(["capinfos", str(tmp_path / "d.pcap")], capture_output=True).returncode == 0


def test_a_representor_that_vanishes_ends_the_capture_and_nothing_stays_armed(lab, tmp_path):
    other = PREFIX + "x"  # a second lab: this one loses a VF
    env = dict(lab)
    r = subprocess.run(CLI + ["lab", "up", "--prefix", other], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        p = subprocess.Popen(
            ["ip", "netns", "exec", f"{other}-pf"] + CLI + ["capture", "--vf", "3", "-w", str(tmp_path / "r.pcap")],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        STARTED.append(p)
        lines = []
        for line in p.stderr:
            lines.append(line)
            if line.startswith("ibwire: capturing "):
                break
        subprocess.run(["ip", "netns", "exec", f"{other}-pf", "ip", "link", "del", "pf0vf3"], check=True)
        rc, err = _finish(p, lines, sig=None)
        assert rc == 1 and "representor pf0vf3 vanished" in err and "Traceback" not in err, err
        left = subprocess.run(
            ["ip", "netns", "exec", f"{other}-pf", "sh", "-c", "tc qdisc show; ip -br link"],
            capture_output=True,
            text=True,
        ).stdout
        assert "clsact" not in left and "ibwmon" not in left
    finally:
        subprocess.run(CLI + ["lab", "down", "--prefix", other, "--force"], env=env, capture_output=True)


def test_tshark_lists_the_extcap_targets_and_captures_exactly_vf2_through_ibwire(lab, tmp_path, burst):
    home = tmp_path / "home"
    env = dict(lab, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    r = subprocess.run(CLI + ["extcap", "--install"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and (home / ".config/wireshark/extcap/ibwire-extcap").exists(), r.stderr
    listed = subprocess.run(["tshark", "-D"], env=env, capture_output=True, text=True).stdout
    assert f"ibwire-{PREFIX}-vf2 (ibwire: VF 2 of lab {PREFIX})" in listed, listed
    out = tmp_path / "x.pcapng"
    before = _vf_packets(2)
    t = subprocess.Popen(
        ["tshark", "-i", f"ibwire-{PREFIX}-vf2", "-a", "duration:5", "-w", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(t)
    to_vf2 = traffic.write_burst(topology.describe(PREFIX), "vf1", "vf2", 20, str(tmp_path / "to_vf2.pcap"))
    for line in t.stderr:  # the engine's pcap header reached tshark: armed, and the 5 s begin
        if "Capture started" in line:
            break
    _replay(burst, limit=2000)
    _replay(to_vf2, vf=1)
    _, err = t.communicate(timeout=60)
    assert t.returncode == 0, err
    n = _vf_packets(2) - before
    assert n >= 2000 + 20 and len(list(iter_frames(str(out)))) == n, err  # exactly VF 2's packets, all of them
    assert all(MAC[2] in pair for pair in _macs(out))
    deadline = time.monotonic() + 10
    while (
        _armed() != NOTHING or list(Path(lab["IBWIRE_RUN_DIR"]).glob("capture-*.json"))
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _armed() == NOTHING and not list(Path(lab["IBWIRE_RUN_DIR"]).glob("capture-*.json"))


def test_lab_down_refuses_while_a_capture_runs_unless_forced(lab, tmp_path):  # last: it takes the lab down
    p, lines = _start(lab, "--vf", 2, "-w", tmp_path / "f.pcap")
    r = subprocess.run(CLI + ["lab", "down", "--prefix", PREFIX], env=lab, capture_output=True, text=True)
    assert r.returncode == 2 and f"capture {p.pid}" in r.stderr and "--force" in r.stderr, r.stderr
    assert f"{PREFIX}-pf" in topology.namespaces()
    r = subprocess.run(CLI + ["lab", "down", "--prefix", PREFIX, "--force"], env=lab, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rc, err = _finish(p, lines, sig=None)
    assert rc == 130 and "captured" in err, err  # stopped as by Ctrl-C, disarmed
    assert not [ns for ns in topology.namespaces() if ns.startswith(PREFIX + "-")]
    assert not list(Path(lab["IBWIRE_RUN_DIR"]).glob("capture-*.json"))
