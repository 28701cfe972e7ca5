"""`ibwire stats --storage --report` as Chromium lays it out, for each storage protocol: a latency histogram
per opcode holding every completed command of that opcode, and a latency-over-time chart with one mark per
completed command inside its plot area (errors crossed), all as the JSON of the same run counts them; the
page fetches nothing."""

import json
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from pictures_browser import render, self_contained

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
CASES = [  # (capture, decode-as, per-kind section, kind key)
    (PUBLIC / "m3_nvme_host-echo_dump.pcap", ["-d", "nvme-rdma"], "by_opcode", "opcode"),
    (ROOT / "captures" / "nfs-rdma.pcap", [], "rpc_by_procedure", "procedure"),
    (ROOT / "captures" / "iser-rdma.pcap", [], "iser_by_opcode", "opcode"),
    (ROOT / "captures" / "smb-direct.pcap", [], "smb_by_command", "command"),
]


@pytest.mark.parametrize("pcap, decode_as, per, kind", CASES, ids=lambda v: getattr(v, "stem", None))
def test_storage_report_draws_what_the_storage_view_counts(tmp_path, pcap, decode_as, per, kind):
    if not pcap.exists():
        pytest.skip(f"{pcap} is one of the public captures in ../shared/captures/public (see its MANIFEST.md)")
    page = tmp_path / "storage.html"
    r = run_ibwire("stats", "--storage", pcap, *decode_as, "--report", page, "-T", "json", unwrapped=True)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert self_contained(page.read_text())
    charts = render(page, tmp_path)["charts"]
    hist = {c["data"]["kind"]: c for c in charts if c["cls"] == "chart histogram storage"}
    for row in res[per]:
        if row["completed"]:
            assert sum(n for n, _ in hist[row[kind]]["bars"]) == row["completed"], row[kind]
    (over,) = [c for c in charts if c["cls"] == "chart latency-time"]
    done = sum(row["completed"] for row in res[per])
    marks = {k: m for k, m in over["marks"].items() if k in ("command", "error")}
    assert sum(m["n"] for m in marks.values()) == int(over["data"]["commands"]) == done
    assert all(m["inside"] == m["n"] for m in marks.values())


def test_report_without_storage_is_refused(tmp_path):
    r = run_ibwire("stats", ROOT / "captures" / "nfs-rdma.pcap", "--report", tmp_path / "x.html")
    assert r.returncode == 2 and "--report applies to --storage" in r.stderr
    assert not (tmp_path / "x.html").exists()
