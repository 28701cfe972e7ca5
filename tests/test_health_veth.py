"""Real traffic: PFC, PAUSE and LLDP DCBX frames sent through a raw AF_PACKET socket over a direct veth pair
(a Linux bridge would not forward MAC control frames) between two network namespaces, captured with
`ibwire capture --backend netdev` on the far end: every frame arrives as sent, tshark and `ibwire health`
count the same pauses, and a 400 ms run of XOFFs is the storm it is."""

import json
import os
import signal
import subprocess
import sys

import pytest

from dissectors.dcbfacts import lldp_frame, pause_frame, pfc_frame
from ibwire.files import iter_frames

NS = f"ibhw{os.getpid() % 100000}"
CLI = [sys.executable, "-c", "from ibwire.cli import main; main()"]
SWITCH = bytes.fromhex("020000009902")
XOFFS, EVERY_S = 400, 0.001  # 65535 quanta last 33.6 ms at 1 Gb/s: one XOFF per ms keeps the pause on
#                                  even when a busy machine delays a few sends

SENDER = (
    r"""
import socket, sys, time
frames = [bytes.fromhex(h) for h in sys.argv[2:]]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for f in frames[:2]:
    s.send(f)
time.sleep(0.05)
t = time.monotonic()
for k, f in enumerate(frames[2:]):
    while time.monotonic() < t + k * %r:
        pass
    s.send(f)
"""
    % EVERY_S
)


def _ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def veth():
    a, b = f"{NS}a", f"{NS}b"
    try:
        for ns in (a, b):
            assert _ip("ip", "netns", "add", ns).returncode == 0
        assert (
            _ip("ip", "link", "add", "pfc0", "netns", a, "type", "veth", "peer", "name", "pfc1", "netns", b).returncode
            == 0
        )
        for ns, dev in ((a, "pfc0"), (b, "pfc1")):
            assert _ip("ip", "link", "set", dev, "up", ns=ns).returncode == 0
        yield a, b
    finally:
        for ns in (a, b):
            _ip("ip", "netns", "del", ns)


def test_pfc_storm_and_dcbx_over_veth_are_captured_and_found(veth, tmp_path):
    a, b = veth
    sent = [lldp_frame(SWITCH, "swp2", [3], [(3, 3, 4791)]), pause_frame(SWITCH, 100)]
    sent += [pfc_frame(SWITCH, {3: 0xFFFF}) for _ in range(XOFFS)] + [pfc_frame(SWITCH, {3: 0})]
    out = tmp_path / "veth.pcap"
    cap = subprocess.Popen(
        ["ip", "netns", "exec", b] + CLI + ["capture", "--backend", "netdev", "-i", "pfc1", "-w", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in cap.stderr:
            lines.append(line)
            if line.startswith("ibwire: capturing "):
                break
        else:
            raise AssertionError("capture did not start: " + "".join(lines))
        r = subprocess.run(
            ["ip", "netns", "exec", a, sys.executable, "-c", SENDER, "pfc0"] + [f.hex() for f in sent],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
    finally:
        cap.send_signal(signal.SIGINT)
        err = "".join(lines) + cap.stderr.read()
        rc = cap.wait(timeout=60)
    assert rc == 130, err
    got = [bytes(f.data) for f in iter_frames(str(out)) if bytes(f.data)[6:12] == SWITCH]
    assert got == sent  # every frame, byte for byte, in order

    tshark = subprocess.run(
        ["tshark", "-r", str(out), "-Y", "macc.cbfc.enbv.c3 == 1"], capture_output=True, text=True, check=True
    ).stdout
    res = subprocess.run(CLI + ["health", str(out), "-T", "json", "--port-speed", "1G"], capture_output=True, text=True)
    doc = json.loads(res.stdout)
    p3 = next(e for e in doc["pause"] if e["priority"] == 3)
    assert p3["frames"] == len(tshark.splitlines()) == XOFFS + 1
    assert (p3["xoff"], p3["xon"], len(p3["episodes"])) == (XOFFS, 1, 1)
    assert p3["longest_s"] == pytest.approx(XOFFS * EVERY_S, rel=0.1)
    assert next(e for e in doc["pause"] if e["priority"] == "all")["frames"] == 1
    assert doc["dcbx"]["02:00:00:00:99:02"]["pfc_enabled"] == [3]
    storms = [f for f in doc["findings"] if f["kind"] == "pause_storm"]
    assert len(storms) == 1 and storms[0]["frame_count"] == XOFFS + 1 and res.returncode == 1
    # at 100 Gb/s each XOFF lasts 335.5 µs: the 1 ms spacing leaves gaps, so no storm
    fast = json.loads(subprocess.run(CLI + ["health", str(out), "-T", "json"], capture_output=True, text=True).stdout)
    assert not [f for f in fast["findings"] if f["kind"] == "pause_storm"]
