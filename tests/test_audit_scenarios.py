"""`ibwire audit` on the generator's multi-tenant samples, run as a user runs it: the findings must be exactly
the ones each scenario declares in `[[expect.findings]]` (rule, severity, endpoints, P_Key, trap), with the
evidence frames tshark selects with the scenario's display filter; the clean scenarios must give none.
Native IB ends are named by port GUID; RoCE ends (tenants split by VLAN and IP subnet) by MAC and IP."""

import json
import subprocess
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

CAPS = Path(__file__).resolve().parents[1] / "captures"
SCENARIOS = ["multitenant-clean", "multitenant-breach"]
ROCE_SCENARIOS = ["roce-multitenant-clean", "roce-multitenant-breach"]


def _scenario(name: str) -> dict:
    return tomllib.loads((CAPS / f"{name}.toml").read_text())


def _audit(name: str, *extra):
    return run_ibwire(
        "audit",
        CAPS / f"{name}.pcap",
        "--policy",
        CAPS / f"{name}.partitions.conf",
        "--tenants",
        CAPS / f"{name}.tenants.toml",
        *extra,
    )


def _tshark_frames(pcap: Path, display_filter: str) -> list:
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return sorted(int(n) for n in out.split())


def _declared(name: str, pcap: Path = None) -> list:
    """The scenario's findings with port names turned into the port GUIDs the scenario gives those ports (on
    RoCE: their MAC and IP), and the evidence frames tshark selects in `pcap` (default: the sample)."""
    doc = _scenario(name)
    pcap = pcap or CAPS / f"{name}.pcap"
    roce = doc["scenario"].get("link", "roce2").startswith("roce")
    ports = {p["name"]: p for p in doc.get("port", [])}
    out = []
    for f in doc["expect"]["findings"]:
        frames = _tshark_frames(pcap, f["evidence"])
        if pcap == CAPS / f"{name}.pcap":
            assert len(frames) == f["frames"], f"{f['rule']}: the evidence filter selects {len(frames)} frames"
        want = {"rule": f["rule"], "severity": f["severity"], "frames": frames}
        for key in ("src", "dst", "port"):
            if key in f and roce:
                want[f"{key}_mac"], want[f"{key}_ip"] = ports[f[key]]["mac"], ports[f[key]]["ip"]
            elif key in f:
                want[f"{key}_guid"] = int(ports[f[key]]["guid"], 0)
        if "pkey" in f:
            want["pkey"] = int(f["pkey"], 0)
        if "trap" in f:
            want["trap"] = f["trap"]
        out.append(want)
    return out


def _as_declared(finding: dict, want: dict) -> dict:
    """The audit's finding seen through the keys the scenario declares."""
    got = {}
    for key in want:
        v = finding.get(key)
        if key.endswith("_guid") or key == "pkey":
            v = int(v, 0) if v is not None else None
        elif key == "frames":
            v = sorted(v)
        got[key] = v
    return got


def unmatched_findings(findings: list, declared: list):
    """(declared but not reported, reported but not declared)."""
    unmatched = list(findings)
    missing = []
    for want in declared:
        hit = next((f for f in unmatched if _as_declared(f, want) == want), None)
        if hit is None:
            missing.append(want)
        else:
            unmatched.remove(hit)
    return missing, unmatched


@pytest.mark.parametrize("name", SCENARIOS + ROCE_SCENARIOS)
def test_audit_gives_exactly_the_declared_findings(name, tshark):
    declared = _declared(name)
    run = _audit(name, "--format", "json")
    assert run.returncode == (0 if name.endswith("clean") else 1), run.stdout + run.stderr
    findings = json.loads(run.stdout)["findings"]
    missing, unmatched = unmatched_findings(findings, declared)
    assert missing == [] and unmatched == [], (
        f"declared but not reported: {missing}\nreported but not declared: "
        f"{[(f['rule'], f['severity'], f['frames'], f['description']) for f in unmatched]}"
    )
    if name.endswith("clean"):
        assert findings == []  # no false positive on the clean fabric


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_endpoint_is_mapped_from_the_captures_own_sm_sweep(name):
    doc = _scenario(name)
    lid = {int(p["guid"], 0): p["lid"] for p in doc["port"]}
    report = json.loads(_audit(name, "--format", "json").stdout)
    ports = {int(p["port_guid"], 0): p for p in report["ports"]}
    tenants = tomllib.loads((CAPS / f"{name}.tenants.toml").read_text())["tenants"]
    for body in tenants.values():
        for ep in body["endpoints"]:
            g = int(ep["port_guid"], 0)
            assert ports[g]["lid"] == lid[g], ep  # the LID the scenario's SM assigned
            assert "capture" in ports[g]["mapping_source"]
    assert all("-> LID" in m["mapping"] and "capture" in m["mapping"] for m in report["endpoint_mappings"])
    # only the IPoIB broadcast groups belong to no tenant
    assert all(k.startswith("LID 49") and "GID ff12:401b:" in k for k in report["unnamed_endpoints"])


def test_exit_status_and_html_report(tmp_path):
    clean = _audit("multitenant-clean", "--report", tmp_path / "clean.html")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "PASS" in clean.stdout and (tmp_path / "clean.html").is_file()
    breach = _audit("multitenant-breach", "--report", tmp_path / "breach.html")
    assert breach.returncode == 1, breach.stdout + breach.stderr
    assert "FAIL" in breach.stdout
    page = (tmp_path / "breach.html").read_text()
    assert page.startswith("<!DOCTYPE html>") or page.lower().startswith("<!doctype html>")
    assert "http://" not in page and "https://" not in page  # self-contained: no fetches
    rules = Counter(f["rule"] for f in _scenario("multitenant-breach")["expect"]["findings"])
    for rule, n in rules.items():
        assert page.count(f"data-rule='{rule}'") == n, rule
    # --fail-on sets the bar: the clean scenario passes even at the lowest one
    assert _audit("multitenant-breach", "--fail-on", "info", "--format", "md").returncode == 1
    assert _audit("multitenant-clean", "--fail-on", "info", "--format", "md").returncode == 0


def test_breach_report_in_headless_chromium(tmp_path):
    report = tmp_path / "audit-report.html"
    assert _audit("multitenant-breach", "--report", report).returncode == 1
    dom = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            report.as_uri(),
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
        ],  # not in ~/.config
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert 'id="verdict">FAIL<' in dom
    matrix = dom[dom.index('id="matrix"') : dom.index("</table>", dom.index('id="matrix"'))]
    for tenant in ("tenantA", "tenantB", "storage", "infra"):
        assert f"<th>{tenant}</th>" in matrix
    findings = dom[dom.index('id="findings"') :]
    for f in _scenario("multitenant-breach")["expect"]["findings"]:
        assert f'data-rule="{f["rule"]}"' in findings


@pytest.mark.parametrize("name", ROCE_SCENARIOS)
def test_roce_tenant_matrix_counts_what_tshark_sees_between_the_subnets(name, tshark):
    """Every RoCE end belongs to a tenant by MAC/IP/VLAN (also vf2 answering in red's VLAN), and each matrix
    cell holds the packets tshark counts between the tenants' subnets."""
    report = json.loads(_audit(name, "--format", "json").stdout)
    assert report["unnamed_endpoints"] == {}
    nets = {"red": "10.77.0.8/30", "blue": "10.77.0.12/30, 10.77.0.100"}
    cells = {(c["from"], c["to"]): c["packets"] for c in report["matrix"]}
    for a in nets:
        for b in nets:
            want = len(
                _tshark_frames(
                    CAPS / f"{name}.pcap", f"infiniband.bth && ip.src in {{{nets[a]}}} && ip.dst in {{{nets[b]}}}"
                )
            )
            assert cells.get((a, b), 0) == want, (a, b)
    crossing = [c for c in report["matrix"] if c["from"] != c["to"] and c["packets"]]
    assert bool(crossing) == name.endswith("breach")
