"""`ibwire health --report` as Chromium lays it out: the pause chart holds every pause episode, each
congestion chart every ECN-CE mark and CNP of its flow inside its plot area, the spread charts the flows per
path, all as the JSON of the same run counts them; the page fetches nothing."""

import json
from pathlib import Path

from conftest import run_ibwire
from pictures_browser import render, self_contained

PCAP = Path(__file__).resolve().parents[1] / "captures" / "pfc-storm.pcap"


def test_health_report_draws_what_health_counts(tmp_path):
    page = tmp_path / "health.html"
    r = run_ibwire("health", PCAP, "--report", page, "-T", "json", unwrapped=True)
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    text = page.read_text()
    assert self_contained(text) and "series" not in res
    probe = render(page, tmp_path)
    charts = probe["charts"]
    pause = next(c for c in charts if c["cls"] == "chart pause")
    for e in res["pause"]:
        band = pause["marks"][f"episode p{e['priority']}"]
        assert band["n"] == band["inside"] == len(e["episodes"])
    flows = [c for c in charts if c["cls"] == "chart congestion"]
    assert [c["data"]["flow"] for c in flows] == [c["flow"] for c in res["congestion"]]
    for chart, c in zip(flows, res["congestion"]):
        assert int(chart["data"]["ce"]) == chart["marks"].get("ce", {"n": 0})["n"] == c["ce_marked"]
        assert int(chart["data"]["cnps"]) == chart["marks"].get("cnp", {"n": 0})["n"] == c["cnps"]
        for kind in ("ce", "cnp"):
            m = chart["marks"].get(kind)
            assert m is None or m["inside"] == m["n"], (c["flow"], kind)
    for h in ("crc", "modulo"):
        chart = next(c for c in charts if c["cls"] == f"chart spread {h}")
        counts = res["ecmp"]["flows_per_path"][h]
        assert [b[0] for b in chart["bars"]] == [n for n in counts if n]
    assert "pause storm: port 02:00:00:00:99:01" in text
