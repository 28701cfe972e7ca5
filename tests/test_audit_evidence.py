"""A verdict is never better than its evidence: damage is read past and counted, nothing readable is no
verdict (exit 2), and --fail-on treats "evidence incomplete" like any finding."""

import json
import struct

from conftest import ROOT
from test_outputs_safe import cli

CAPS = ROOT / "captures"


def _scenario(name):
    return ["--policy", CAPS / f"{name}.partitions.conf", "--tenants", CAPS / f"{name}.tenants.toml"]


def _damage_record(src, dst, index):
    """Copy of `src` with record `index` (0-based) given an impossible length, as a bad disk block would."""
    raw = bytearray(src.read_bytes())
    off = 24
    for _ in range(index):
        off += 16 + struct.unpack_from("<I", raw, off + 8)[0]
    struct.pack_into("<I", raw, off + 8, 0x7FFFFFF0)
    dst.write_bytes(raw)
    return dst


def _audit_json(capsys, *args):
    status = cli("audit", *args, "--format", "json")
    out = capsys.readouterr()
    return status, (json.loads(out.out) if out.out.strip() else None), out.err


def test_damage_is_read_past_and_reported(tmp_path, capsys):
    """The breach sample damaged at frame 51: the audit reads on (as `stats` does) and still finds every
    breach of the whole file, and says what it could not read."""
    whole_status, whole, _ = _audit_json(capsys, CAPS / "multitenant-breach.pcap", *_scenario("multitenant-breach"))
    cap = _damage_record(CAPS / "multitenant-breach.pcap", tmp_path / "d.pcap", 50)
    status, d, _ = _audit_json(capsys, cap, *_scenario("multitenant-breach"))
    assert whole_status == status == 1 and d["verdict"] == "FAIL"
    assert d["evidence"]["skipped"] == 1 and d["evidence"]["packets"] == 234 and not d["evidence"]["complete"]
    assert {f["rule"] for f in d["findings"] if f["severity"] == "breach"} == {
        f["rule"] for f in whole["findings"] if f["severity"] == "breach"
    }
    assert [f for f in d["findings"] if f["rule"] == "evidence-incomplete"]
    assert cli("stats", cap, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["summary"]["packets"] == 234


def test_fail_on_covers_incomplete_evidence(tmp_path, capsys):
    """Nothing at or above --fail-on among the frames read, but one frame unread: never a bare PASS nor
    exit 0; the verdict line, JSON, Markdown and the HTML report all say the evidence is incomplete."""
    clean = CAPS / "multitenant-clean.pcap"
    status, d, _ = _audit_json(capsys, clean, *_scenario("multitenant-clean"))
    assert status == 0 and d["verdict"] == "PASS" and d["evidence"]["complete"]
    cap = _damage_record(clean, tmp_path / "d.pcap", 120)
    status, d, err = _audit_json(capsys, cap, *_scenario("multitenant-clean"))
    verdict = "PASS (evidence incomplete: 1 of 199 frames unreadable; 62 bytes of the captures unread)"
    assert status == 4 and d["verdict"] == verdict and not d["evidence"]["complete"]
    assert err.strip() == f"ibwire: {verdict}"
    (finding,) = d["findings"]
    assert finding["rule"] == "evidence-incomplete" and finding["number"] == 1
    assert "1 unreadable (skipped)" in finding["description"]
    assert cli("audit", cap, *_scenario("multitenant-clean")) == 4
    assert " ".join(capsys.readouterr().out.split()).startswith(verdict + " ")  # the terminal's first line
    assert cli("audit", cap, *_scenario("multitenant-clean"), "--format", "md", "--report", tmp_path / "r.html") == 4
    assert capsys.readouterr().out.startswith(f"# Isolation audit: {verdict}\n")
    assert f"<span class='PARTIAL' id='verdict'>{verdict}</span>" in (tmp_path / "r.html").read_text()
    status, d, _ = _audit_json(capsys, cap, *_scenario("multitenant-clean"), "--fail-on", "warning")
    assert status == 1 and d["verdict"] == "FAIL"


def test_nothing_readable_is_no_verdict(tmp_path, capsys):
    raw = (CAPS / "multitenant-clean.pcap").read_bytes()
    unknown_link = bytearray(raw)
    struct.pack_into("<I", unknown_link, 20, 147)  # LINKTYPE_USER0
    files = {
        "ten-bytes.pcap": raw[:10],
        "header-only.pcap": raw[:24],
        "unknown-link.pcap": bytes(unknown_link),
        "header-cut.pcap": raw[:20],
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        status, d, err = _audit_json(capsys, tmp_path / name, *_scenario("multitenant-clean"))
        assert status == 2, (name, err)
        assert "no verdict" in err, (name, err)
        assert d["verdict"] == "INCOMPLETE" and d["findings"][0]["rule"] == "evidence-incomplete", name
    cut = _damage_record(CAPS / "multitenant-clean.pcap", tmp_path / "early.pcap", 1)
    cut.write_bytes(cut.read_bytes()[:600])  # damage early, nothing to resync to
    status, d, err = _audit_json(capsys, cut, *_scenario("multitenant-clean"))
    assert status == 2 and d["verdict"] == "INCOMPLETE" and d["evidence"]["skipped"] >= 1
