"""`ibwire capture --backend ibsim` as a user runs it: real ibsim, real opensm, real smpquery."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.lab.simfabric import SimFabric

TOPO = Path(__file__).resolve().parent / "fabric" / "small.topo"


def _wait_capturing(cap) -> list:
    lines = []
    for line in cap.stderr:
        lines.append(line)
        if line.startswith("ibwire: capturing "):
            return lines
    raise AssertionError("capture did not start: " + "".join(lines))


def _wait_for(out, summary: str, timeout: float = 30.0):
    """Until the capture file holds a packet whose summary contains `summary` (the capture runs in its own
    process, possibly behind on a loaded machine)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(summary in decode_frame(f).summary for f in iter_frames(out)):
            return
        time.sleep(0.1)
    raise AssertionError(f"no {summary} in {out} after {timeout:.0f} s")


def _sigint_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_capture_cli_records_opensm_sweep_and_smpquery(tmp_path):
    """Started as a shell starts a background job (SIGINT ignored, as in CI), `kill -INT` still stops it."""
    out = tmp_path / "sm.pcap"
    exe = Path(sys.executable).parent / "ibwire"
    with SimFabric(str(TOPO)) as sim:
        env = dict(os.environ, IBSIM_SERVER_PORT=str(sim.port), IBWIRE_RUN_DIR=str(tmp_path / "run"))
        cap = subprocess.Popen(
            [str(exe), "capture", "--backend", "ibsim", "-w", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_sigint_ignored,
        )
        try:
            _wait_capturing(cap)
            sim.start_opensm()
            sim.run(["smpquery", "nodedesc", "1"])
            _wait_for(out, "SubnGetResp(NodeDescription)")
        finally:
            cap.send_signal(signal.SIGINT)
            _, err = cap.communicate(timeout=30)
    assert cap.returncode == 130, err  # Ctrl-C's exit status
    assert (
        f"stopped by Ctrl-C; {len(list(iter_frames(out)))} packets kept in {out}, a valid capture; nothing was armed"
        in err
        and "Traceback" not in err
    ), err
    decoded = [decode_frame(f) for f in iter_frames(out)]
    summaries = [d.summary for d in decoded]
    assert any("SubnGet(NodeInfo)" in s for s in summaries)
    assert any("SubnSet(PortInfo)" in s for s in summaries)  # opensm assigning LIDs
    assert any("SubnGetResp(NodeDescription)" in s for s in summaries)
    assert all(d.flat["icrc.status"] == "good" and d.flat["vcrc.status"] == "good" for d in decoded)
    assert subprocess.run(["tshark", "-r", out], capture_output=True, text=True).returncode == 0


def test_capture_ends_with_one_sentence_when_the_simulator_goes_away(tmp_path):
    out = tmp_path / "gone.pcap"
    exe = Path(sys.executable).parent / "ibwire"
    sim = SimFabric(str(TOPO))
    try:
        env = dict(os.environ, IBSIM_SERVER_PORT=str(sim.port), IBWIRE_RUN_DIR=str(tmp_path / "run"))
        cap = subprocess.Popen(
            [str(exe), "capture", "--backend", "ibsim", "-w", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = _wait_capturing(cap)
        sim.run(["smpquery", "-D", "nodeinfo", "0"])
    finally:
        sim.close()  # ibsim is killed
    _, err = cap.communicate(timeout=30)
    err = "".join(lines) + err
    assert cap.returncode == 1 and "ibsim" in err and "went away" in err and "Traceback" not in err, err
    frames = list(iter_frames(out))
    assert [decode_frame(f).flat["mad.method"] for f in frames] == [0x01, 0x81]  # kept what it saw
