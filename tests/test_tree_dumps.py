"""`ibwire decode -V` dumps a Data item's bytes as tshark -V does (print.c prints the hex and ASCII of every
`data` item when -x is not given): a blank line after the `Data (N bytes)` title, then for every 16 bytes the
offset, the bytes in hex and their printable characters.  tshark 4.0 (`tshark -n -V`) is the oracle, frame by
frame, on every public capture and every sample; with -x both print the frame's bytes instead.

The Data of an IB packet holds its pad bytes, as tshark counts them (`data.len` too).  Frames where only one
of the two shows a top-level Data, or shows it over other bytes, are the decoders' known differences, each
said where it is tested: protocols above IP that tshark dissects and ibwire shows as bytes (ICMP's echo data,
SMB over TCP; DIFFERENT below), Mellanox's EoIB header tshark finds by heuristic, tshark 4.0 misreading DC and
XRC headers (test_tshark_shapes.MISREAD), its RPC-over-RDMA reassembly of m3_mlx_rocev1_test.pcap, and
iSER's RDMA payloads (test_iser_tshark.py).
"""

import re

import pytest
from conftest import run_ibwire
from test_tree_tshark import ibwire_v
from test_tshark_shapes import CAPTURES, ROOT, run_tshark

HEAD = re.compile(r"Frame (\d+): ")
DUMP = re.compile(r"[0-9a-f]{4,}  [0-9a-f]{2}")


def top_data_dumps(text: str) -> dict:
    """frame number -> the lines of the dump that follows its top-level `Data (N bytes)` title (with the
    blank line before them), for frames that have one."""
    out, n, lines, k = {}, None, text.split("\n"), 0
    while k < len(lines):
        line = lines[k]
        m = HEAD.match(line)
        if m:
            n = int(m.group(1))
        elif re.fullmatch(r"Data \(\d+ bytes\)", line):
            block = [line]
            k += 1
            while k < len(lines) and (lines[k] == "" or DUMP.match(lines[k])):
                block.append(lines[k])
                k += 1
            out[n] = block[: len(block) - (block[-1] == "")]
            continue
        k += 1
    return out


# Where tshark shows Data that ibwire decodes: iSER PDUs on SENDs to the target's queue pair (tshark finds the
# RDMA-CM conversation only for the initiator's: test_iser_tshark.py)
DECODED = {"iser-rdma.pcap"}


def other_bytes(path) -> set:
    """Frames whose Data tshark cuts elsewhere: ICRC cut off (tshark reads the last four bytes as one:
    docs/tshark-output.md), or a Mellanox EoIB header tshark's heuristic finds."""
    theirs = run_tshark(path, "-n", "-T", "fields", "-e", "frame.number", "-Y", "infiniband.eoib")
    ours = run_ibwire("decode", path, "-T", "fields", "-e", "frame.number", "-Y", 'icrc.status == "truncated"')
    return {int(n) for n in (theirs + ours.stdout).split()}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_data_dumps_are_tsharks(path, tshark):
    theirs = top_data_dumps(run_tshark(path, "-n", "-V"))
    ours = top_data_dumps(ibwire_v(path))
    expected = set(theirs) - other_bytes(path)
    both = sorted(expected & set(ours))
    assert [n for n in both if theirs[n] != ours[n]] == [], "dumps that differ from tshark's"
    assert all(len(ours[n]) > 2 for n in ours), "a Data title without its dump"
    if path.name not in DECODED:
        assert len(both) >= 0.75 * len(expected), f"{len(expected) - len(both)} of tshark's {len(expected)} missing"


def test_hex_option_dumps_the_frame_instead(tshark):
    """-V -x: no Data dump inside the tree, the frame's bytes after it, as tshark -V -x."""
    path = ROOT / "captures" / "rxe-rc-send.pcap"
    theirs = run_tshark(path, "-n", "-V", "-x", "-c", "40")
    ours = run_ibwire("decode", path, "-V", "-x", "-c", "40", check=True).stdout
    assert top_data_dumps(theirs) and all(len(b) == 1 for b in top_data_dumps(theirs).values())
    assert top_data_dumps(ours) == top_data_dumps(theirs)
    first = [line for line in theirs.split("\n\n")[1].split("\n") if DUMP.match(line)]  # frame 1's bytes
    assert first and first == [line for line in ours.split("\n\n")[1].split("\n") if DUMP.match(line)]
