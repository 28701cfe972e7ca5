"""The audit's HTML report, rendered in Chromium, draws the subnet with every CA in the colour of the tenant
the scenario's tenants.toml gives its port, and a timeline with one mark per evidence frame of every finding,
placed at the time tshark reads for that frame."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from pictures_browser import render, self_contained

CAPS = Path(__file__).resolve().parents[1] / "captures"


@pytest.fixture(scope="module")
def breach(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit-report")
    out = tmp / "audit.html"
    r = run_ibwire(
        "audit",
        CAPS / "multitenant-breach.pcap",
        "--policy",
        CAPS / "multitenant-breach.partitions.conf",
        "--tenants",
        CAPS / "multitenant-breach.tenants.toml",
        "--format",
        "json",
        "--report",
        out,
    )
    assert r.returncode == 1, r.stderr  # the sample holds breaches
    return {"result": json.loads(r.stdout), "html": out.read_text(), "page": render(out, tmp)}


def test_audit_topology_coloured_by_declared_tenant(breach):
    declared = {
        int(ep["port_guid"], 16): name
        for name, t in tomllib.loads((CAPS / "multitenant-breach.tenants.toml").read_text())["tenants"].items()
        for ep in t["endpoints"]
    }
    view = json.loads(run_ibwire("fabric", "--format", "json", CAPS / "multitenant-breach.pcap", check=True).stdout)
    port_of = {p["node_guid"]: p["guid"] for p in view["ports"] if p["port_num"] == 1}
    (topo,) = [c for c in breach["page"]["charts"] if c["cls"] == "chart topology"]
    cas = [(int(d["guid"], 16), d["tenant"], w) for c, d, w, *_ in topo["groups"] if c.startswith("node ca")]
    assert len(cas) == len([n for n in view["nodes"] if n["type"] == "CA"]) == 8
    assert {g: t for g, t, _ in cas} == {g: declared.get(port_of[g], "") for g, _, _ in cas}
    assert all(w > 50 for _, _, w in cas)
    assert sum(1 for c, *_ in topo["groups"] if c.startswith("link")) == len(view["links"])


def test_audit_timeline_marks_every_evidence_frame_at_its_time(breach, tshark):
    findings = breach["result"]["findings"]
    (tl,) = [c for c in breach["page"]["charts"] if c["cls"] == "chart timeline"]
    want = {}
    for f in findings:
        key = f"finding {f['severity']}"
        want[key] = want.get(key, 0) + len(f["frames"])
    assert {k: v["n"] for k, v in tl["marks"].items()} == want
    assert all(v["n"] == v["inside"] for v in tl["marks"].values())
    # positions: linear in tshark's frame times, from the capture's first packet
    r = subprocess.run(
        [
            tshark,
            "-r",
            str(CAPS / "multitenant-breach.pcap"),
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "frame.time_relative",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rel = {int(a): float(b) for a, b in (line.split("\t") for line in r.stdout.splitlines())}
    pts = [(rel[int(title.split("(frame ")[1].split(")")[0])], x) for _, title, x, _ in tl["points"]]
    (t_a, x_a), (t_b, x_b) = min(pts), max(pts)
    scale = (x_b - x_a) / (t_b - t_a)
    assert all(abs(x_a + (t - t_a) * scale - x) < 1.0 for t, x in pts)
    assert x_a - t_a * scale == pytest.approx(0, abs=1.0)  # time 0 = capture start, at the plot's left edge


def test_audit_report_stays_self_contained(breach):
    assert self_contained(breach["html"])
    assert "<h2>Findings</h2>" in breach["html"] and "Timeline of findings" in breach["html"]
