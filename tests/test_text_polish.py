"""Numbers and text read well: rates to sensible precision, plural forms, worded labels, tables that stay
tables, text wrapped between words at the terminal's width (COLUMNS) or not at all when piped, `--help`
that flows as sentences, the same `--top` default in stats and flows, and HTML reports that fit a 1280 px
browser window (Chromium)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_ibwire
from pictures_browser import page_width

DEMO = ROOT / "captures" / "multitenant-breach"
AUDIT = (f"{DEMO}.pcap", "--policy", f"{DEMO}.partitions.conf", "--tenants", f"{DEMO}.tenants.toml")
SNAKE = re.compile(r"\b[a-z0-9]+_[a-z0-9_]+\b")
ONE_PLURAL = re.compile(r"(?<![\d,.])1 (packets|frames|findings|MADs|SMPs|nodes|links|conversations|rows)\b")


def _env(columns=None):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return env if columns is None else dict(env, COLUMNS=str(columns))


def _ibwire(*args, columns=None):
    exe = Path(sys.executable).parent / "ibwire"
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=_env(columns), timeout=300)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout


def test_stats_rate_has_three_significant_figures_as_tshark_counts(public_dir, tshark):
    path = public_dir / "srinivas_infiniband.pcap"
    times = subprocess.run(
        [tshark, "-r", path, "-T", "fields", "-e", "frame.time_relative"], capture_output=True, text=True, check=True
    ).stdout.split()
    rate = len(times) / float(times[-1])  # 43 packets over 250.57 s
    line = next(s for s in _ibwire("stats", path).splitlines() if "packets/s" in s)
    assert line.split("│")[2].strip() == f"{rate:.3g}" == "0.172"


def test_labels_are_worded_and_one_row_tables_stay_tables(public_dir):
    text = _ibwire("stats", public_dir / "srinivas_infiniband.pcap") + _ibwire(
        "stats", ROOT / "captures" / "congestion.pcap"
    )
    assert not SNAKE.findall(text), SNAKE.findall(text)[:5]
    assert "ICRC good" in text and "ECN CE" in text
    # srinivas has one P_Key: its table still has a header row, as a two-key table does
    assert re.search(r"by P_Key\n.*\n┃ P_Key +┃ base +┃ membership +┃ packets", text)
    assert not SNAKE.findall(_ibwire("flows", f"{DEMO}.pcap", columns=200))


def test_no_plural_after_one(public_dir, tmp_path):
    one = public_dir / "scapy_roce_uts_cnp_cx4lx.pcap"  # a capture of one packet
    run_ibwire("flows", one, "--report", tmp_path / "one.html", check=True)
    assert "1 packet," in (tmp_path / "one.html").read_text()
    run_ibwire("audit", *AUDIT, "--report", tmp_path / "audit.html")
    run_ibwire("fabric", f"{DEMO}.pcap", "--report", tmp_path / "fabric.html", check=True)
    texts = [(tmp_path / p).read_text() for p in ("one.html", "audit.html", "fabric.html")]
    texts += [_ibwire("audit", *AUDIT), _ibwire("fabric", f"{DEMO}.pcap"), _ibwire("stats", one)]
    assert "(1 packet, " in texts[3]  # a finding's own count
    for t in texts:
        assert not ONE_PLURAL.search(t), ONE_PLURAL.search(t).group(0)


def _findings():
    return json.loads(_ibwire("audit", *AUDIT, "--format", "json"))["findings"]


def test_piped_text_is_not_wrapped_like_tshark():
    text = _ibwire("audit", *AUDIT)
    for f in _findings():
        assert any(f["description"] in line for line in text.splitlines()), f["description"]
    widths = [len(line) for line in _ibwire("flows", f"{DEMO}.pcap").splitlines()]
    assert max(widths) > 100  # the table's natural width


@pytest.mark.parametrize("columns", [100, 140])
def test_columns_honoured_and_lines_wrap_between_words(columns):
    text = _ibwire("audit", *AUDIT, columns=columns)
    lines = text.splitlines()
    # the Wireshark filters stay whole on their lines, to be copied into Wireshark
    assert max(len(line) for line in lines if not line.startswith("    wireshark ")) <= columns
    tokens = set(" ".join(lines).split())
    for f in _findings():
        # every word of every finding is whole on some line: wrapped between words, never inside one
        assert set(f["description"].split()) <= tokens, f["description"]
    flows = _ibwire("flows", f"{DEMO}.pcap", columns=columns)
    assert max(len(line) for line in flows.splitlines()) <= columns
    # what the table shows is whole: every number and address the wide table holds is in some cell, unsplit
    wide = _ibwire("flows", f"{DEMO}.pcap", columns=400)
    shown = _cells(flows)
    assert shown and all(c in _cells(wide) or re.search(r"[│ ]" + re.escape(c) + r"[│ ]", wide) for c in shown)
    assert {"1", "RC", "0x8001", "44", "34,816"} <= shown


def _cells(text):
    """The text of every table cell line of rich's box-drawn tables."""
    return {c.strip() for line in text.splitlines() for c in line.split("│")[1:-1] if c.strip()}


def _panel_entries(text):
    """(name, [text lines]) of the Commands panel of rich help, and the width the text column has."""
    entries, start, width = [], None, 0
    for line in text.splitlines():
        m = re.match(r"│ (\S+)?( +)(\S.*?)\s*│$", line)
        if not m or "─" in line:
            continue
        if m.group(1):
            start = len(m.group(1)) + len(m.group(2)) + 2
            entries.append((m.group(1), []))
        width = len(line) - 2 - start
        entries[-1][1].append(line[start:-1].rstrip())
    return entries, width


@pytest.mark.parametrize("command", [[], ["lab"]])
def test_help_flows_as_sentences(command):
    """A command's help breaks a line only where its next word does not fit: no line break from the source."""
    text = _ibwire(*command, "--help", columns=100)
    entries, width = _panel_entries(text[text.index("Commands") :])
    assert len(entries) >= 8
    for name, lines in entries:
        for a, b in zip(lines, lines[1:]):
            assert len(a) + 1 + len(b.split()[0]) > width, (name, a, b)
    audit = next(lines for name, lines in entries if name == "audit") if not command else None
    assert audit is None or "(no verdict)" in " ".join(audit)


def test_top_default_is_the_same_in_stats_and_flows():
    flows = _ibwire("flows", f"{DEMO}.pcap")
    stats = _ibwire("stats", f"{DEMO}.pcap")
    every = json.loads(_ibwire("flows", f"{DEMO}.pcap", "--format", "json"))["conversations"]
    assert len(every) == 33  # json keeps every conversation
    assert f"… {len(every) - 20} more rows" in flows and re.search(r"… \d+ more rows", stats)
    rows = [line for line in flows.splitlines() if re.match(r"│ +\d+ │", line)]
    assert len(rows) == 20
    for cmd in ("flows", "stats"):
        assert "20" in re.sub(r"\s+", " ", _ibwire(cmd, "--help", columns=200).split("--top", 1)[1])[:160]


def test_reports_fit_1280_px(tmp_path):
    run_ibwire("audit", *AUDIT, "--report", tmp_path / "audit.html")
    run_ibwire("fabric", f"{DEMO}.pcap", "--report", tmp_path / "fabric.html", check=True)
    run_ibwire("flows", f"{DEMO}.pcap", "--report", tmp_path / "flows.html", check=True)
    for page in ("audit.html", "fabric.html", "flows.html"):
        got = page_width(tmp_path / page, tmp_path, 1280)
        assert got["scrollWidth"] <= got["clientWidth"] and not got["wide"], (page, got)
