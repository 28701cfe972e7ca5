"""End to end on real network namespaces, veth and tc: `ibwire lab` plays a ConnectX in switchdev mode and
`ibwire capture --vf 2 --backend tc-mirror` must capture exactly VF 2's packets, all of them, and leave
no qdisc, filter or monitor interface behind (also after SIGKILL plus `--cleanup`)."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ibwire.readers import iter_frames

PUBLIC = Path(__file__).resolve().parents[1].parent / "shared/captures/public"
SCENARIO = str(PUBLIC / "m3_nvme_nvme-discover.pcap")
PREFIX = f"ibwt{os.getpid() % 100000}"
CLI = [sys.executable, "-c", "from ibwire.cli import main; main()"]
VF2_MAC = "02:1b:00:00:02:02"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    env = dict(os.environ, IBWIRE_RUN_DIR=str(run))
    try:
        r = subprocess.run(CLI + ["lab", "up", "--prefix", PREFIX], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        yield env
    finally:
        subprocess.run(CLI + ["lab", "down", "--prefix", PREFIX], env=env, capture_output=True)
        for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
            if ns.startswith(PREFIX + "-"):
                subprocess.run(["ip", "netns", "del", ns.split()[0]])


def _pf(*args):
    return subprocess.run(["ip", "netns", "exec", f"{PREFIX}-pf"] + list(args), capture_output=True, text=True)


def _vf2_packets():
    r = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-vf2", "ip", "-s", "-j", "link", "show", "eth0"],
                       capture_output=True, text=True)
    s = json.loads(r.stdout)[0]["stats64"]
    return s["rx"]["packets"] + s["tx"]["packets"]


def _tc_state():
    qdiscs = _pf("tc", "qdisc", "show").stdout
    filters = "".join(_pf("tc", "filter", "show", "dev", d, "ingress").stdout
                      for d in ("p0", "pf0vf0", "pf0vf1", "pf0vf2", "pf0vf3"))
    links = _pf("ip", "-br", "link").stdout
    return qdiscs, filters, links


def _start_capture(env, out):
    p = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-pf"] + CLI + ["capture", "--vf", "2", "--backend",
                         "tc-mirror", "-w", str(out)], env=env, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.startswith("ibwire: capturing "):   # armed, counters read, writing: traffic may start
            return p, lines
    raise AssertionError("capture did not start: " + "".join(lines))


def _traffic(env):
    r = subprocess.run(CLI + ["lab", "traffic", SCENARIO, "--prefix", PREFIX], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr   # returns once every receiver got all its frames: nothing in flight


def test_tc_mirror_captures_all_and_only_vf2_then_leaves_nothing(lab, tmp_path):
    out = tmp_path / "vf2.pcap"
    before = _vf2_packets()
    p, lines = _start_capture(lab, out)
    assert "clsact" in _pf("tc", "qdisc", "show", "dev", "pf0vf2").stdout
    _traffic(lab)
    p.send_signal(signal.SIGINT)
    err = "".join(lines) + p.stderr.read()
    assert p.wait(timeout=30) == 0, err
    sent_and_received = _vf2_packets() - before
    frames = list(iter_frames(str(out)))
    mac = bytes.fromhex(VF2_MAC.replace(":", ""))
    assert sent_and_received > 50
    assert len(frames) == sent_and_received                        # all of them
    assert all(mac in (f.data[0:6], f.data[6:12]) for f in frames)  # only VF 2's
    assert f"captured {sent_and_received} of {sent_and_received} packets" in err and "backend drops: 0;" in err
    tshark = subprocess.run(["tshark", "-r", str(out), "-Y", "infiniband.bth"], capture_output=True, text=True)
    assert len(tshark.stdout.splitlines()) == len(frames)          # every frame is a RoCEv2 packet
    qdiscs, filters, links = _tc_state()
    assert "clsact" not in qdiscs and filters.strip() == "" and "ibwmon" not in links


def test_sigkill_then_cleanup_restores_and_lock_blocks_second_capture(lab, tmp_path):
    p, _ = _start_capture(lab, tmp_path / "k.pcap")
    second = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-pf"] + CLI + ["capture", "--vf", "2", "--backend",
                            "tc-mirror", "-w", str(tmp_path / "second.pcap")], env=lab, capture_output=True,
                            text=True, timeout=30)
    assert second.returncode == 2 and "already being captured" in second.stderr
    p.kill()
    p.wait()
    qdiscs, filters, links = _tc_state()
    assert "clsact" in qdiscs and "mirred" in filters and "ibwmon" in links   # a killed capture leaves these
    r = subprocess.run(CLI + ["capture", "--cleanup"], env=lab, capture_output=True, text=True)  # from the root ns
    assert r.returncode == 0 and "undid" in r.stdout, r.stderr
    qdiscs, filters, links = _tc_state()
    assert "clsact" not in qdiscs and filters.strip() == "" and "ibwmon" not in links
    assert not list(Path(lab["IBWIRE_RUN_DIR"]).glob("capture-*.json"))


def test_netdev_backend_rotation_on_the_uplink(lab, tmp_path):
    out = tmp_path / "up.pcap"
    p = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-pf"] + CLI + ["capture", "-i", "p0", "-w", str(out),
                         "-C", "0.01", "-W", "3"], env=lab, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if line.startswith("ibwire: capturing "):
            break
    _traffic(lab)
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    assert p.wait(timeout=30) == 0, err
    files = [out, tmp_path / "up.1.pcap", tmp_path / "up.2.pcap"]
    assert all(f.exists() and f.stat().st_size <= 10_000 + 1600 for f in files)
    assert all(len(list(iter_frames(str(f)))) > 0 for f in files)
