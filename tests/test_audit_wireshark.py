"""The audit's evidence back in Wireshark: `--evidence` writes every evidence frame to a pcapng whose packet
comments name finding number, rule and severity (tshark's frame.comment); every finding carries display
filters (its frames, its frames in the evidence file, and a semantic one) that tshark accepts and that
select its evidence frames; the HTML report links each evidence frame to its decoded layers."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
TSHARK = shutil.which("tshark") or "/usr/bin/tshark"
SCENARIOS = ["multitenant-breach", "roce-multitenant-breach"]


def _tshark(path, *args) -> list:
    out = subprocess.run([TSHARK, "-r", str(path), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line]


@pytest.fixture(scope="module", params=SCENARIOS)
def audited(request, tmp_path_factory):
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    cap = CAPTURES / f"{name}.pcap"
    args = [
        sys.executable,
        "-c",
        "from ibwire.cli import main; main()",
        "audit",
        str(cap),
        "--policy",
        str(CAPTURES / f"{name}.partitions.conf"),
        "--tenants",
        str(CAPTURES / f"{name}.tenants.toml"),
    ]
    out = subprocess.run(
        args + ["--format", "json", "--evidence", str(tmp / "evidence.pcapng"), "--report", str(tmp / "report.html")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp,
    )
    assert out.returncode == 1, out.stderr
    text = subprocess.run(
        args, capture_output=True, text=True, timeout=300, cwd=tmp, env=dict(os.environ, COLUMNS="400")
    ).stdout
    md = subprocess.run(args + ["--format", "md"], capture_output=True, text=True, timeout=300, cwd=tmp).stdout
    return cap, tmp, json.loads(out.stdout)["findings"], text, md


def test_evidence_pcapng_comments_name_finding_rule_and_severity(audited):
    cap, tmp, findings, _, _ = audited
    ev = tmp / "evidence.pcapng"
    cited = {n for f in findings for n in f["frames"]}
    rows = _tshark(ev, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", "-e", "frame.comment")
    assert len(rows) == len(cited) and len(cited) > 5
    comments = [c for row in rows for c in row.split("|")]
    for f in findings:
        mine = [c for c in comments if c.startswith(f"ibwire finding {f['number']}: ")]
        assert len(mine) == len(set(f["frames"]))
        assert all(c.startswith(f"ibwire finding {f['number']}: {f['rule']} {f['severity']}: ") for c in mine)
    # the same bytes as the audited capture's frames
    src = {
        int(n): raw
        for n, raw in (
            r.split("\t") for r in _tshark(cap, "-T", "fields", "-e", "frame.number", "-e", "frame.protocols")
        )
    }
    kept = _tshark(ev, "-T", "fields", "-e", "frame.protocols")
    assert sorted(kept) == sorted(src[n] for n in cited)


def test_every_finding_carries_filters_tshark_accepts_and_that_select_its_frames(audited):
    cap, tmp, findings, _, _ = audited
    with_frames = [f for f in findings if f["frames"]]
    assert with_frames and all(f["wireshark"]["semantic"] for f in findings)
    for f in with_frames:
        assert f["wireshark"]["frames"] == "frame.number in {" + ", ".join(map(str, sorted(set(f["frames"])))) + "}"
    # one tshark pass each: a frame that is evidence for a finding but escapes its semantic filter is an error
    escaped = " || ".join(f"(({f['wireshark']['frames']}) && !({f['wireshark']['semantic']}))" for f in with_frames)
    assert _tshark(cap, "-Y", escaped, "-T", "fields", "-e", "frame.number") == []
    union = " || ".join(f"({f['wireshark']['semantic']})" for f in findings)
    picked = {int(n) for n in _tshark(cap, "-Y", union, "-T", "fields", "-e", "frame.number")}
    assert {n for f in with_frames for n in f["frames"]} <= picked
    for f in with_frames:  # in the evidence file, by comment
        got = _tshark(tmp / "evidence.pcapng", "-Y", f["wireshark"]["evidence"], "-T", "fields", "-e", "frame.number")
        assert len(got) == len(set(f["frames"])), f["rule"]


def test_text_markdown_and_html_show_the_filters_and_link_frames_to_their_decode(audited):
    _, tmp, findings, text, md = audited
    page = (tmp / "report.html").read_text()
    for f in findings:
        w = f["wireshark"]
        assert w["semantic"] in text and f"`{w['semantic']}`" in md
        assert w["semantic"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in page
    links = set(re.findall(r"href='#frame-(\d+)'", page))
    targets = set(re.findall(r"<details class='frame' id='frame-(\d+)'>", page))
    assert links == targets == {str(n) for f in findings for n in f["frames"]}
    # each target holds the decoded layers of that frame (JSON of the layer tree, as `ibwire decode` shows)
    first = min(int(n) for n in targets)
    block = page[page.index(f"id='frame-{first}'") :]
    block = block[: block.index("</details>")]
    assert "&quot;bth&quot;" in block and "p_key" in block


def test_policy_findings_carry_the_partition_filter(tmp_path):
    """A policy finding has no frames; its filter selects the traffic of the partition it is about."""
    confs = Path(__file__).resolve().parent / "audit" / "confs"
    cap = CAPTURES / "multitenant-clean.pcap"
    found = {}
    for conf in ("03_pkey_truncated_merge.conf", "18_bad_guid_rejected.conf"):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from ibwire.cli import main; main()",
                "audit",
                str(cap),
                "--policy",
                str(confs / conf),
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        found.update(
            {
                f["rule"]: f
                for f in json.loads(out.stdout)["findings"]
                if f["rule"].startswith("policy-") and f["severity"] == "breach"
            }
        )
    assert found["policy-reading"]["wireshark"]["semantic"] == "infiniband.bth.p_key in {0x0002, 0x8002}"
    assert found["policy-fallback"]["wireshark"]["semantic"] == "infiniband.bth.p_key == 0xffff"
    for f in found.values():
        assert f["frames"] == [] and f["wireshark"]["frames"] == ""
        _tshark(cap, "-Y", f["wireshark"]["semantic"], "-c", "1")  # tshark accepts it
