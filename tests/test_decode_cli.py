"""`ibwire decode` and `ibwire convert` as a user runs them."""

import json
import subprocess

from conftest import run_ibwire
from tshark_oracle import PUBLIC

SRINIVAS = PUBLIC / "srinivas_infiniband.pcap"
NVME = PUBLIC / "m3_nvme_nvme-discover.pcap"


def test_text_lines_like_tshark():
    r = run_ibwire("decode", NVME, "-c", "65")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 65
    tshark_rows = subprocess.run(
        [
            "tshark",
            "-r",
            NVME,
            "-T",
            "fields",
            "-e",
            "frame.number",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.bth.psn",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for line, row in zip(lines, tshark_rows):
        number, opcode, qp, psn = (row.split("\t") + ["", "", ""])[:4]
        assert line.split()[0] == number
        if opcode:
            assert f"QP=0x{int(qp, 16):06x}" in line and f"PSN={psn}" in line
            assert "P_Key 0xffff full" in line


def test_count_filter_and_opcode_names():
    r = run_ibwire("decode", NVME, "-Y", "bth.opcode in {6, 7, 8}")
    assert r.returncode == 0, r.stderr
    names = {" ".join(l.split()[7:11]) for l in r.stdout.splitlines()}  # after No. Time Src → Dst Protocol Length
    assert names and all(n.startswith("RC RDMA WRITE") for n in names)
    r = run_ibwire("decode", NVME, "-Y", "infiniband.reth.dmalen > 1000", "-c", "2")
    assert len(r.stdout.splitlines()) == 2


def test_jsonl_uses_wireshark_names_and_types():
    r = run_ibwire("decode", SRINIVAS, "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(objs) == 43
    first = objs[0]
    assert set(first) >= {"frame", "time", "caplen", "len", "layers", "errors"}
    assert first["layers"]["lrh"]["dlid"] == 65535 and isinstance(first["layers"]["bth"]["p_key"], int)
    assert first["layers"]["icrc"]["status"] == "good" and first["layers"]["vcrc"]["status"] == "good"
    grh = next(o for o in objs if "grh" in o["layers"])
    assert grh["layers"]["grh"]["sgid"] == "fe80::2:c903:0:1f2d"
    assert any(o["layers"].get("mad", {}).get("mgmtclass") == 0x81 for o in objs)


def test_csv_columns_match_tshark_fields():
    r = run_ibwire("decode", NVME, "--format", "csv", "-e", "frame.number", "-e", "bth.psn", "-e", "aeth.msn")
    rows = [l.split(",") for l in r.stdout.splitlines()[1:]]
    theirs = subprocess.run(
        [
            "tshark",
            "-r",
            NVME,
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "frame.number",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "infiniband.aeth.msn",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert rows == [t.split(",") for t in theirs]


def test_verbose_tree_and_flags():
    r = run_ibwire("decode", PUBLIC / "scapy_roce_uts_cnp_cx4lx.pcap", "-V", "-P")
    assert "CNP Congestion Notification" in r.stdout and "BECN" in r.stdout
    # the tree is tshark's (4.0 names no CNP opcode); ibwire's own fields follow it, labelled in the tree's style:
    # the BECN, the transport, the CRC verdict
    assert "Opcode: Unknown (129)" in r.stdout and "Frame 1: " in r.stdout
    ours = r.stdout.split("\nibwire\n", 1)[1].split("\n\n")[0].splitlines()
    assert {"    [BECN: 1]", "    [Transport: CNP]", "    [ICRC status: good]"} <= set(ours)
    assert all(line.startswith("    [") and line.endswith("]") for line in ours)


def test_bad_icrc_is_flagged(tmp_path):
    data = bytearray(SRINIVAS.read_bytes())
    data[24 + 16 + 16 + 40] ^= 0x01  # a MAD byte of frame 1
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(data))
    r = run_ibwire("decode", bad, "-c", "1", "-Y", 'icrc.status == "bad"')
    assert "bad ICRC" in r.stdout and "bad VCRC" in r.stdout


def test_user_errors_are_one_sentence(tmp_path):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture")
    for args in (
        ("decode", tmp_path / "missing.pcap"),
        ("decode", junk),
        ("decode", NVME, "-Y", "bth.opcode =="),
        ("decode", NVME, "--format", "xml"),
        ("convert", NVME, "-o", tmp_path / "x", "--link", "fddi"),
    ):
        r = run_ibwire(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


def test_truncated_file_decodes_what_is_there(tmp_path):
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(NVME.read_bytes()[:5000])
    r = run_ibwire("decode", cut)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "cut short" in r.stderr or "trailing bytes" in r.stderr  # the damage is reported
    assert len(r.stdout.splitlines()) > 5


def test_convert_247_to_erf_that_tshark_opens(tmp_path):
    ib = tmp_path / "ib247.pcap"
    erf = tmp_path / "back.pcap"
    assert run_ibwire("convert", SRINIVAS, "-o", ib, "--link", "ib").returncode == 0
    bad = subprocess.run(["tshark", "-r", ib], capture_output=True, text=True)
    assert bad.returncode != 0  # tshark 4.0 cannot open link type 247
    assert run_ibwire("convert", ib, "-o", erf, "--link", "erf").returncode == 0
    assert subprocess.run(["tshark", "-r", erf], capture_output=True, text=True).stdout.count("\n") == 43
    ours = run_ibwire("decode", ib, "--format", "jsonl").stdout.splitlines()
    assert len(ours) == 43 and all(json.loads(l)["layers"]["icrc"]["status"] == "good" for l in ours)


def test_convert_ib_with_grh_to_roce1_keeps_icrc(tmp_path):
    out = tmp_path / "roce1.pcapng"
    r = run_ibwire("convert", SRINIVAS, "-o", out, "--link", "eth")
    assert "wrote 6 packets" in r.stderr and "skipped 37" in r.stderr
    objs = [json.loads(l) for l in run_ibwire("decode", out, "--format", "jsonl").stdout.splitlines()]
    assert len(objs) == 6 and all(o["layers"]["icrc"]["status"] == "good" for o in objs)
    assert subprocess.run(["tshark", "-r", out], capture_output=True, text=True).stdout.count("RoCE") >= 0
