"""Differential test against real opensm: for each partitions.conf in tests/audit/confs (valid and odd: C
numbers, GUID forms, keyword and flag prefixes, memberships, repeated/split/merged partitions, automatic
P_Keys, multicast groups, comments, CRLF, over-long lines, files opensm rejects), opensm on ibsim programs
the fabric, and `ibwire audit --state live` of that sweep against the same file finds no P_Key drift on any
port.  Each file also declares what opensm must program (`# expect GUID: keys`) and which finding the audit
must raise about its reading of the file (`# finding RULE SEVERITY LINE`); both are checked."""

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "audit"))
from osm_fabric import HCAS, SWITCHES, fabric, opensm_options  # noqa: E402

CONFS = sorted((Path(__file__).resolve().parent / "audit" / "confs").glob("*.conf"))


def _audit(env, cwd: Path, policy: Path, *extra):
    """libumad2sim leaves a sys-PID directory in the working directory: run in the test's own."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ibwire.cli import main; main()",
            "audit",
            "--policy",
            str(policy),
            "--state",
            "live",
            "--format",
            "json",
            "--as-opensm",
            *extra,
        ],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode in (1, 4), out.stderr  # no --tenants: no tenant pair judged, so never a bare pass
    return json.loads(out.stdout)


def _sweep(conf: Path, tmp: Path):
    """opensm programs the fabric from conf; the audit reads the sweep back against conf (and, as the
    negative control for the first file, against another file)."""
    extra = ["--allow-both-pkeys"] if opensm_options(conf) else []
    with fabric(conf, tmp / conf.stem) as (env, log):
        doc = _audit(env, log.parent, conf, *extra)
        control = _audit(env, log.parent, CONFS[8]) if conf == CONFS[0] else None
        return doc, control, log.read_text(errors="replace")


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("confs")
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda c: _sweep(c, tmp), CONFS))
    return dict(zip(CONFS, results))


def test_at_least_twenty_files_valid_and_rejected():
    assert len(CONFS) >= 20
    texts = [c.read_bytes() for c in CONFS]
    assert sum(b"policy-fallback" in t for t in texts) >= 5  # files opensm rejects
    assert sum(b"policy-fallback" not in t for t in texts) >= 15  # files opensm applies


@pytest.mark.parametrize("conf", CONFS, ids=[c.stem for c in CONFS])
def test_audit_of_the_sweep_agrees_with_opensm(sweeps, conf):
    doc, _, log = sweeps[conf]
    ports = {int(p["port_guid"], 16): p for p in doc["ports"]}
    assert set(HCAS) | set(SWITCHES) <= set(ports), "every CA port and switch port 0 was read live"
    assert all(ports[g]["hardware_source"] == "live smpquery pkeys" for g in HCAS)
    drift = [f["description"] for f in doc["findings"] if f["rule"] == "pkey-drift"]
    assert drift == [], "the audit's reading of the file differs from what opensm programmed"

    text = conf.read_text(errors="replace")
    for guid, keys in re.findall(r"^# expect (0x[0-9a-f]+): ([0-9a-fx ]+)$", text, re.M):
        want = sorted(int(k, 16) for k in keys.split())
        got = sorted(int(k, 16) for k in ports[int(guid, 16)]["hardware"].split(", ") if k)
        assert got == want, f"opensm programmed {guid} differently from what {conf.name} declares"

    expected = re.findall(r"^# finding (\S+) (\S+) (\d+)\s*$", text, re.M)
    for rule, severity, line in expected:
        hits = [
            f
            for f in doc["findings"]
            if f["rule"] == rule and f["severity"] == severity and f.get("policy_line", 0) == int(line)
        ]
        assert hits, f"no {severity} {rule} finding about line {line}"
    rejected = "Partition configuration in error" in log
    assert rejected == any(f["rule"] == "policy-fallback" for f in doc["findings"])
    if rejected:
        parse_error = re.search(r"PARSE ERROR: line (\d+)", log)
        fallback = next(f for f in doc["findings"] if f["rule"] == "policy-fallback")
        assert fallback["severity"] == "breach" and "ALL=full" in fallback["description"]
        assert fallback.get("policy_line", 0) == (int(parse_error.group(1)) if parse_error else 0)


def test_negative_control_another_files_reading_shows_drift(sweeps):
    """The fabric opensm programmed from the first file, audited against a different file: drift."""
    _, control, _ = sweeps[CONFS[0]]
    drift = {f["port_guid"] for f in control["findings"] if f["rule"] == "pkey-drift"}
    assert {"0x0000000000100001", "0x000000000010000a"} <= drift
