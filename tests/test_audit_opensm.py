"""Real opensm programs P_Key tables on an ibsim fabric; the audit's reading of the same partitions.conf
must agree with `smpquery pkeys` port by port, and a table rewritten behind opensm's back is drift."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ibwire.audit.policy import Port, load_policy

HERE = Path(__file__).resolve().parent / "audit"
CONF = HERE / "partitions.conf"
sys.path.insert(0, str(HERE))
from osm_fabric import fabric as osm_fabric  # noqa: E402


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    with osm_fabric(CONF, tmp_path_factory.mktemp("ibsim")) as (env, _log):
        yield env


def _diag(env, *args) -> str:
    return subprocess.run(
        list(args), env=env, capture_output=True, text=True, timeout=20, check=True, cwd=env["OSM_TMP_DIR"]
    ).stdout  # umad2sim writes its ./sys-PID tree in the cwd


def _ports(env):
    """(port GUID, LID, node type, port number) of every end port: ibnetdiscover -p, then saquery NR per LID."""
    out = []
    for kind, lid, port in re.findall(r"^(CA|SW)\s+(\d+)\s+(\d+)\s", _diag(env, "ibnetdiscover", "-p"), re.M):
        if kind == "SW" and any(o[1] == int(lid) for o in out):
            continue
        guid = re.search(r"port_guid\.+(0x[0-9a-f]+)", _diag(env, "saquery", "NR", lid)).group(1)
        out.append((int(guid, 16), int(lid), "switch" if kind == "SW" else "ca", 0 if kind == "SW" else int(port)))
    return out


def _smpquery_table(env, lid, port):
    text = _diag(env, "smpquery", "pkeys", str(lid), str(port))
    return {int(x, 16) for x in re.findall(r"0x[0-9a-f]{4}", text.split("pkeys capacity")[0]) if int(x, 16) & 0x7FFF}


def _audit(env, *extra):
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from ibwire.cli import main; main()",
            "audit",
            "--policy",
            str(CONF),
            "--state",
            "live",
            "--format",
            "json",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=env["OSM_TMP_DIR"],
    )


def test_policy_reading_agrees_with_opensm_tables_port_by_port(fabric):
    policy = load_policy(str(CONF))
    sm_guid = int(re.search(r"sm guid (0x[0-9a-f]+)", _diag(fabric, "sminfo")).group(1), 16)
    ports = _ports(fabric)
    assert len(ports) == 6
    for guid, lid, ntype, num in ports:
        want = policy.expected_table(Port(guid, ntype, guid == sm_guid))
        assert _smpquery_table(fabric, lid, num) == want, f"port 0x{guid:x} LID {lid}"
    # the limited/full split the file declares is really what opensm wrote
    tables = {guid: _smpquery_table(fabric, lid, num) for guid, lid, _, num in ports}
    assert 0x8001 in tables[0x100001] and 0x0001 in tables[0x100004]
    assert 0x8002 in tables[0x100007] and 0x0002 in tables[0x10000A]
    assert 0x8003 in tables[0x100001] and 0x0003 in tables[0x100004]


def test_clean_fabric_state_passes_then_table_changed_behind_opensm_is_drift(fabric, tmp_path):
    clean = _audit(fabric, "--tenants", str(HERE / "tenants.toml"))
    assert clean.returncode == 0, clean.stderr
    assert [f for f in json.loads(clean.stdout)["findings"] if f["rule"] == "pkey-drift"] == []
    lid = next(lid for guid, lid, _, _ in _ports(fabric) if guid == 0x10000A)
    # Hca4 is a limited member of blue only; give it tenant red's full key with a SubnSet opensm never sent
    subprocess.run(
        [sys.executable, str(HERE / "pkey_set.py"), str(lid), "0", "0x7fff", "0x0002", "0x0003", "0x8001"],
        env=fabric,
        check=True,
        capture_output=True,
        timeout=20,
        cwd=fabric["OSM_TMP_DIR"],
    )
    assert 0x8001 in _smpquery_table(fabric, lid, 1)
    report = tmp_path / "drift.html"
    dirty = _audit(fabric, "--report", str(report), "--tenants", str(HERE / "tenants.toml"))
    assert dirty.returncode == 1, dirty.stderr
    drift = [f for f in json.loads(dirty.stdout)["findings"] if f["rule"] == "pkey-drift"]
    assert [(f["port_guid"], f["severity"]) for f in drift] == [("0x000000000010000a", "breach")]
    assert "0x8001 (full)" in drift[0]["description"]
    assert report.read_text().count("pkey-drift") >= 1

    # the HTML report, rendered by a real browser, shows the verdict, the tenant matrix and the finding
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert 'id="verdict">FAIL<' in dom
    matrix = dom[dom.index('id="matrix"') : dom.index("</table>", dom.index('id="matrix"'))]
    assert "<th>red</th>" in matrix and "<th>blue</th>" in matrix
    findings = dom[dom.index('id="findings"') :]
    assert 'data-rule="pkey-drift"' in findings and "0x000000000010000a" in findings
