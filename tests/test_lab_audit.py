"""Issue 7's lab proof, end to end on real network namespaces, veth and tc: the RoCE multi-tenant scenarios are
replayed between the lab's VFs and remote host (`ibwire lab traffic`), VF 2 is captured with
`ibwire capture --vf 2 --backend tc-mirror`, and `ibwire audit` of that capture with the scenario's policy and
tenants passes for the clean scenario and reports the breach for the breach scenario: exactly the declared
findings that involve VF 2, with the evidence frames tshark selects in the captured file."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_scenarios import _declared, _scenario, unmatched_findings

from ibwire.files import iter_frames

CAPS = Path(__file__).resolve().parents[1] / "captures"
PREFIX = f"ibwa{os.getpid() % 100000}"
CLI = [sys.executable, "-c", "from ibwire.cli import main; main()"]
VF2_IP = "10.77.0.12"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    env = dict(os.environ, IBWIRE_RUN_DIR=str(tmp_path_factory.mktemp("run")))
    try:
        r = subprocess.run(CLI + ["lab", "up", "--prefix", PREFIX], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        yield env
    finally:
        subprocess.run(CLI + ["capture", "--cleanup"], env=env, capture_output=True)
        subprocess.run(CLI + ["lab", "down", "--prefix", PREFIX], env=env, capture_output=True)
        for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines():
            if ns.startswith(PREFIX + "-"):
                subprocess.run(["ip", "netns", "del", ns.split()[0]])


def _capture_vf2_during_traffic(env, scenario: Path, out: Path) -> str:
    p = subprocess.Popen(
        ["ip", "netns", "exec", f"{PREFIX}-pf"]
        + CLI
        + ["capture", "--vf", "2", "--backend", "tc-mirror", "-w", str(out)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in p.stderr:
            lines.append(line)
            if line.startswith("ibwire: capturing "):  # armed: traffic may start
                break
        else:
            raise AssertionError("capture did not start: " + "".join(lines))
        r = subprocess.run(
            CLI + ["lab", "traffic", str(scenario), "--prefix", PREFIX],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr  # returns once every frame arrived: nothing in flight
        p.send_signal(signal.SIGINT)
        err = "".join(lines) + p.stderr.read()
        assert p.wait(timeout=30) == 130, err  # stopped by Ctrl-C
        return err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _tshark_count(pcap: Path, flt: str) -> int:
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", flt], capture_output=True, text=True, check=True)
    return len(out.stdout.splitlines())


@pytest.mark.parametrize("name", ["roce-multitenant-clean", "roce-multitenant-breach"])
def test_vf2_capture_of_the_lab_replay_audits_as_the_scenario_declares(lab, tmp_path, tshark, name):
    out = tmp_path / "vf2.pcap"
    _capture_vf2_during_traffic(lab, CAPS / f"{name}.toml", out)
    # every VF 2 packet of the scenario was captured, with the scenario's own addresses, and nothing else
    want = _tshark_count(CAPS / f"{name}.pcap", f"infiniband.bth && ip.addr == {VF2_IP}")
    assert want > 0
    assert len(list(iter_frames(str(out)))) == want
    assert _tshark_count(out, f"infiniband.bth && ip.addr == {VF2_IP}") == want

    run = subprocess.run(
        CLI
        + [
            "audit",
            str(out),
            "--policy",
            str(CAPS / f"{name}.partitions.conf"),
            "--tenants",
            str(CAPS / f"{name}.tenants.toml"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(run.stdout)
    assert report["unnamed_endpoints"] == {}  # every lab host is recognised as its tenant's endpoint
    involving_vf2 = [f for f in _scenario(name)["expect"]["findings"] if "vf2" in (f.get("src"), f.get("dst"))]
    declared = [w for w, f in zip(_declared(name, out), _scenario(name)["expect"]["findings"]) if f in involving_vf2]
    missing, unexpected = unmatched_findings(report["findings"], declared)
    assert missing == [] and unexpected == [], (
        missing,
        [(f["rule"], f["frames"], f["description"]) for f in unexpected],
    )
    if name.endswith("clean"):
        assert run.returncode == 0 and report["verdict"] == "PASS" and report["findings"] == []
    else:
        assert run.returncode == 1 and report["verdict"] == "FAIL"
        assert [f["severity"] for f in report["findings"]] == ["breach"] and declared[0]["frames"]
