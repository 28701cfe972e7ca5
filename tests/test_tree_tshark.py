"""`ibwire decode -V` is tshark's tree: each line both print is tshark's line (wording, value, bit picture,
indentation), frame by frame, on every public capture and every sample; and the labels come from
Wireshark's own field registrations.  tshark 4.0 (`tshark -n -V`) is the oracle; the lines where tshark 4.0
is wrong are named below with the reason.
"""

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import tshark_runs
from conftest import run_ibwire
from test_tshark_shapes import CAPTURES, MISREAD, run_tshark

ROOT = Path(__file__).resolve().parents[1]
HEAD = re.compile(r"Frame \d+: ")
# Lines tshark 4.0 gets wrong (test_mad_oracle.TSHARK_EXCEPTIONS): the DR SMP's D bit (read from the wrong
# byte, always 0) and Status (the 16-bit word with D in it).  ibwire prints IBA's values.
WRONG = {
    "D (Direction Bit)",
    "Status@SMP (Directed Route)",
    "Primary Packet Rate",
    "Alternate Packet Rate",
    "Primary Flow Label",
    "Alternate Flow Label",
}
# tshark runs heuristic dissectors ibwire does not have (RPC-over-RDMA on a SEND), so its protocol list is longer.
OTHER = {"Protocols in frame"}
# Not yet as tshark shows them (issue 27, left): the bytes a `Data` layer holds after IPoIB and after a cut
# TCP segment (tshark leaves the ICRC and padding elsewhere), and the SA attribute's second title level.
NOT_YET = {"Data", "Length"}
# Sections whose every line is tshark's, in tshark's order (its expert items aside): LLDP (each TLV a subtree,
# DCBX application entries and CEE sub-TLVs in theirs) and MAC Control (PAUSE, PFC's class bits and times).
EXACT = {"Link Layer Discovery Protocol", "MAC Control"}
# RPC replies whose call tshark 4.0 does not find (on RoCE it keeps RPC conversations per direction): it shows
# program, version and procedure 0, ibwire the call it matched by XID (docs/storage.md); so with SCSI responses
# over iSER: tshark shows LUN 0xffff, ibwire the LUN of the command it matched by Initiator Task Tag
UNMATCHED = re.compile(r"\[(Program: Unknown \(0\)|Program Version: 0|Procedure: proc-0 \(0\)|LUN: 0xffff)\]")
# … nor an SA record's second title: its fields are tshark's, one level less indented.  (Notices:
# test_notice_tshark.py, every trap crafted.)


def frames(text: str) -> list:
    """Each frame's -V lines (blank lines and hex dumps left out)."""
    out = []
    for line in text.splitlines():
        if HEAD.match(line):
            out.append([])
        if out and line.strip() and not re.match(r"[0-9a-f]{4}  ", line):
            out[-1].append(line)
    return out


def label(line: str) -> str:
    text = re.sub(r"^[01. ]+ = ", "", line.strip().strip("[]"))
    return text.split(": ")[0]


def sections(lines: list) -> dict:
    """Top-level sections of a frame by protocol (`Frame`, `Ethernet II`, `InfiniBand` …): lines, with the
    title of the container each line is in."""
    out, name, parents = {}, None, []
    for line in lines:
        depth = (len(line) - len(line.lstrip())) // 4
        if depth == 0:
            name = re.split(r"[,:(]| \d", line)[0].strip()
            parents = [line]
            out.setdefault(name, []).append((line, ""))
            continue
        parents[depth:] = [line.strip()]
        out.setdefault(name, []).append((line, re.split(r" \w+\(", parents[depth - 1])[0] if depth > 1 else ""))
    return out


def misread(theirs: list) -> bool:
    """A frame whose opcode tshark 4.0 misreads (test_tshark_shapes.MISREAD): its InfiniBand lines are not
    the packet's."""
    return any(
        int(x.rsplit("(", 1)[1].rstrip(")")) in MISREAD for x in theirs if re.match(r"        Opcode: .*\(\d+\)$", x)
    )


def inexact(theirs: list, ours: list) -> list:
    """The EXACT sections whose lines are not tshark's lines."""
    t_sec, o_sec = sections(theirs), sections(ours)
    return [
        name
        for name in EXACT
        if (name in t_sec or name in o_sec)
        and [x for x, _ in o_sec.get(name, [])] != [x for x, _ in t_sec.get(name, []) if not x.strip().startswith("[")]
    ]


def differences(theirs: list, ours: list) -> list:
    """Our lines whose label tshark shows in the same section but that are not one of tshark's lines."""
    bad = []
    t_sec, o_sec = sections(theirs), sections(ours)
    for name, lines in o_sec.items():
        if name not in t_sec or (name == "InfiniBand" and misread(theirs)):
            continue
        by_label = defaultdict(set)
        for line, _ in t_sec[name]:
            by_label[label(line)].add(line)
        details = any(x.startswith("    SA Subn") for x in theirs)
        for line, parent in lines:
            lab = label(line)
            if details and line.strip() in {x.strip() for x in by_label.get(lab, ())}:
                continue
            if (
                lab in by_label
                and line not in by_label[lab]
                and lab not in WRONG | OTHER | NOT_YET
                and f"{lab}@{parent}" not in WRONG
                and not any(UNMATCHED.fullmatch(x.strip()) for x in by_label[lab])
            ):
                bad.append((line, sorted(by_label[lab])[:2]))
    return bad


def ibwire_v(path) -> str:
    """`ibwire decode -V` of a capture, run once per test run (tshark_runs.py) for the tree tests here and in
    test_tree_dumps: the same command on the same bytes prints the same text."""

    def run():
        done = run_ibwire("decode", path, "-V")
        assert done.returncode == 0, done.stderr
        return done.stdout

    return tshark_runs.once("ibwire", path, ("decode", "-V"), run)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_tree_lines_are_tsharks(path, tshark):
    """Frame by frame, every line of ibwire's -V whose label tshark shows in the same protocol is one of
    tshark's lines for it, indentation included; most of tshark's InfiniBand lines are ibwire's too."""
    theirs = frames(run_tshark(path, "-n", "-V"))
    ours = frames(ibwire_v(path))
    assert len(ours) == len(theirs)
    shared = total = 0
    for n, (t, o) in enumerate(zip(theirs, ours), 1):
        assert o[0] == t[0], n  # Frame n: … bytes on wire … (on interface …)
        if any("Expert Info (Error/Malformed)" in x for x in t):
            # cut short or lengths beyond the bytes: tshark words its verdicts into the length lines (as ibwire
            # does, length_experts) and takes the last 4 bytes for an ICRC; those frames are compared up to
            # their InfiniBand section
            o = o[: next((i for i, x in enumerate(o) if x == "InfiniBand"), len(o))]
            assert not differences(t, o), (n, differences(t, o)[:5])
            continue
        assert not differences(t, o), (n, differences(t, o)[:5])
        assert not inexact(t, o), (n, inexact(t, o))
        if misread(t):
            continue
        ib_t = [x for x, _ in sections(t).get("InfiniBand", [])]
        mine = set(o)
        total += len(ib_t)
        shared += sum(x in mine for x in ib_t)
    assert shared >= 0.85 * total, (shared, total)


def test_tree_words_the_issue_example(tshark):
    """The tree of issue 27: `InfiniBand`, then `Base Transport Header` with the opcode named as tshark names
    it, four spaces a level."""
    out = run_ibwire(
        "decode", ROOT / "captures" / "loss-retransmit.pcap", "-V", "-Y", "bth.opcode == 4", "-c", "1", check=True
    ).stdout
    assert (
        "\nInfiniBand\n    Base Transport Header\n        Opcode: Reliable Connection (RC) - SEND Only (4)\n"
        "        1... .... = Solicited Event: True\n" in out
    )


def test_label_table_is_wiresharks(tshark):
    """ibwire/report/packets/ws_labels.py is what tests/ws_labels_gen.py makes of this tshark's registrations."""
    made = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "ws_labels_gen.py")], capture_output=True, text=True, check=True
    ).stdout
    assert made == (ROOT / "ibwire" / "report" / "packets" / "ws_labels.py").read_text()


def titles(lines: list) -> list:
    """The InfiniBand section's container titles (its lines that are not `label: value`), ibwire's own
    `[RC analysis]` container (as tshark's `[SEQ/ACK analysis]` in TCP) left out."""
    return [x for x, _ in sections(lines).get("InfiniBand", []) if ": " not in x and x.strip() != "[RC analysis]"][1:]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_tree_titles_are_tsharks(path, tshark):
    """Every header and MAD container of the InfiniBand section is titled as tshark titles it, in its order and
    at its depth: `CM ConnectRequest`, the RMPP header by its type (` Not an RMPP Packet `), an SA record's
    `Attribute (PathRecord)` over `PathRecord`, the IP CM private data under a REQ, a Notice's trap description
    over its fields and `Trap n DataDetails` over its trap's."""
    theirs = frames(run_tshark(path, "-n", "-V"))
    for n, (t, o) in enumerate(zip(theirs, frames(ibwire_v(path))), 1):
        if misread(t):
            continue
        assert titles(o) == titles(t), n
