"""-T json, -T ek, jsonl and -V print most frames from programs learned per shape (ibwire/report/packets/templates.py,
shapes.py); a frame's text must be byte for byte what its full decode prints.  The reference is the same
`ibwire decode` with the learned programs switched off (Printer._shaped), run on every public capture
and every shipped sample, IB over ERF, RoCEv1, RoCEv2 over IPv4 and IPv6, VLANs and truncated frames
among them; the compiled formats the programs use are checked against Python's own."""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from conftest import PUBLIC, ROOT

from ibwire.report.packets.program import compile_parts, render
from ibwire.report.packets.tshark_doc import frame_time

BOTH = r"""
import json, os, sys
from ibwire.cli import main
from ibwire.report.packets.printer import Printer

learned = Printer._shaped
for out, args in json.loads(sys.argv[1]):
    for name, shaped in (("learned", learned), ("full", lambda self: False)):
        Printer._shaped = shaped
        fd = os.open(out + "." + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        saved = os.dup(1)
        os.dup2(fd, 1)
        os.close(fd)
        sys.argv = ["ibwire", "decode", *args]
        try:
            main()
        except SystemExit:
            pass
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
"""


def _differ(tmp_path, runs) -> list:
    """The runs (lists of decode arguments) whose output differs with and without learned programs; one
    process decodes them all, each both ways."""
    jobs = [(str(tmp_path / str(i)), [str(a) for a in args]) for i, args in enumerate(runs)]
    subprocess.run([sys.executable, "-c", BOTH, json.dumps(jobs)], check=True, cwd=ROOT, timeout=1200)
    return [
        " ".join(args) for out, args in jobs if Path(out + ".learned").read_bytes() != Path(out + ".full").read_bytes()
    ]


def _captures():
    files = sorted((ROOT / "captures").glob("*.pcap"))
    return files + (sorted(p for p in PUBLIC.iterdir() if ".pcap" in p.name) if PUBLIC.is_dir() else [])


def test_learned_programs_print_what_the_full_decode_prints(tmp_path):
    fmts = (["-T", "json"], ["-T", "ek"], ["--format", "jsonl"], ["-V"])
    runs = [[path, *fmt] for path in _captures() for fmt in fmts]
    assert not _differ(tmp_path, runs), "learned programs print other text than the full decode"


def _sweep(tmp_path) -> Path:
    """The shipped SM sweep repeated to 2,000 frames, a microsecond apart."""
    from ibwire.files import iter_frames
    from ibwire.files.writers import PcapWriter

    frames = list(iter_frames(str(ROOT / "captures" / "sm-sweep.pcap")))
    repeated = tmp_path / "sm-sweep-2000.pcap"
    with PcapWriter(str(repeated), frames[0].linktype, nanos=True) as w:
        for i in range(2000):
            f = frames[i % len(frames)]
            w.write(f.data, f.time + i * 1e-6, f.wirelen, flush=False)
    return repeated


def test_management_datagrams_print_alike(tmp_path):
    """MADs of one shape (class, method, attribute and every byte but the transaction, keys, LIDs, GUIDs and
    counters) print from a program: a real opensm sweep of an ibsim fabric whose queries are each made 20
    times (new transactions, the answers alike), and the shipped SM sweep repeated to 2,000 frames."""
    from fabric import scenario

    again = [["smpquery", "portinfo", "2", "1"], ["smpquery", "nodeinfo", "3"], ["perfquery", "-x", "2"]]
    again += [["saquery", "PR", "3", "4"], ["smpquery", "-D", "nodeinfo", "0,1"]]
    (tmp_path / "sweep").mkdir()
    sim = scenario.run(str(tmp_path / "sweep"), tools=scenario.TOOLS + again * 20)
    repeated = _sweep(tmp_path)
    fmts = (["-T", "json"], ["-T", "ek"], ["--format", "jsonl"], ["-V"])
    assert not _differ(tmp_path, [[path, *fmt] for path in (sim["path"], repeated) for fmt in fmts])


def test_directed_route_smps_along_other_paths_share_a_program(tmp_path):
    """A directed-route SMP's hop pointer and count and its initial and return paths print from its bytes:
    the shipped SM sweep's SubnGet(NodeInfo) requests, sent along five paths of one and two hops, print from
    one learned program (the sweep repeated to 2,000 frames; test_management_datagrams_print_alike checks
    the text)."""
    from ibwire.decode.stream import Stream
    from ibwire.report.packets.printer import _decode
    from ibwire.report.packets.shapes import Shapes

    repeated = _sweep(tmp_path)
    shapes, printed = Shapes("tree", _decode), []
    for batch in Stream(str(repeated), True, 2048):
        progs, rec = [], batch.rec
        prog_of = shapes.assign(batch, np.arange(len(rec)), progs)
        ask = (rec["mad_class"] == 0x81) & (rec["mad_method"] == 1) & (rec["mad_attrid"] == 0x11)
        printed += [
            (batch.frame(i).data[172:236], progs[p] if p >= 0 else None)
            for i, p in zip(np.flatnonzero(ask), prog_of[ask])
        ]
    late = printed[len(printed) // 2 :]  # (every shape met 16 times by then)
    assert len({path for path, _ in late}) == 5
    assert None not in {p for _, p in late} and len({p for _, p in late}) == 1


def test_the_fuzz_corpus_prints_alike(tmp_path):
    """test_fuzz_decode's mutants (truncated, bit-flipped, re-linked and extreme-valued copies of the public
    captures' frames), each seed frame sent 20 times first so that its shape is learned and its mutants meet
    the program: every frame prints as its full decode does."""
    from collections import defaultdict

    from test_fuzz_decode import mutations, seeds

    from ibwire.files.writers import PcapWriter

    by_link, rng = defaultdict(list), random.Random(27)
    for seed in seeds()[::2]:
        by_link[seed.linktype] += [seed.data] * 20
        for n, (linktype, data) in enumerate(mutations(rng, [seed])):
            if n >= 20:
                break
            by_link[linktype].append(data)
    runs = []
    for linktype, datas in by_link.items():
        path = tmp_path / f"mutants-{linktype}.pcap"
        with PcapWriter(str(path), linktype) as w:
            for i, data in enumerate(datas):
                w.write(data, 1700000000 + i * 1e-6, len(data), flush=False)
        runs += [[path, *fmt] for fmt in (["-T", "json"], ["-T", "ek"], ["--format", "jsonl"], ["-V"])]
    assert not _differ(tmp_path, runs)


def test_analysis_fields_and_a_filter_print_alike(tmp_path):
    """RC analysis columns (acks_frame, ack_rtt as Python writes a float) and a -Y selection."""
    runs = [
        ["captures/rxe-rc-write-loss2.pcap", "--format", "jsonl", "-Y", "bth.analysis.ack_rtt"],
        ["captures/loss-retransmit.pcap", "-T", "json", "-Y", "bth.opcode != 17"],
        ["captures/roce-v6-vlan.pcap", "-T", "json", "-c", "9"],
        ["captures/loss-retransmit.pcap", "-T", "ek", "-Y", "bth.opcode != 17"],
        ["captures/rxe-rc-write.pcap", "-V", "-x"],
    ]
    assert not _differ(tmp_path, runs)


def test_compiled_formats_write_what_python_writes():
    rnd = random.Random(5)
    ns = [0, 1, 1000, 10**9, 2 * 10**9, 15000, 10**16, -5000, 999_999_999, 10**15 + 1]
    ns += [rnd.randrange(-(10**15), 10**15) for _ in range(5000)] + [rnd.randrange(0, 10**7) for _ in range(5000)]
    dt = np.dtype([("v", "i8")])
    rec = np.array([(v,) for v in ns], dt)
    prog = compile_parts([("repr", "v", 0, 0), "|", ("date", "v", 9, 8), "\n"], dt)
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    lines = render(rec, np.arange(len(ns)), np.zeros(len(ns), np.int32), [prog]).decode().splitlines()
    want = [f"{v / 1e9!r}|{frame_time(v)}" for v in ns if v >= 0]
    assert [line for line, v in zip(lines, ns) if v >= 0] == want


def test_frame_ops_read_bits_bytes_and_addresses():
    frame = bytes(range(40))
    buf = np.frombuffer(frame + frame[:12], np.uint8)
    parts = [
        ("fint", 1, 2, 4, 8, 0),  # bits 12..19 of 0x0102: 0x10
        " ",
        ("fint", 0, 4, 0, 32, 8),
        " ",
        ("fint", 0, 0x80 | 2, 0, 16, 0),  # little-endian 0x0100
        " ",
        ("fhex", 2, -30, ":"),
        " ",
        ("fip4", 4),
        " ",
        ("fip6", 8),
        " ",
        ("fmac", 0),
        " ",
        ("fint", -2, 2, 0, 16, 4),
        "\n",
    ]
    out = render(
        np.zeros(2, [("v", "i8")]),
        np.arange(2),
        np.zeros(2, np.int32),
        [compile_parts(parts, np.dtype([("v", "i8")]))],
        None,
        (buf, np.array([0, 40]), np.array([40, 12])),
    ).decode()
    full, cut = out.splitlines()
    assert full == (
        f"16 00010203 256 {frame[2:10].hex(':')} 4.5.6.7 809:a0b:c0d:e0f:1011:1213:1415:1617 00:01:02:03:04:05 2627"
    )
    assert cut.split(" ")[5] == ""  # a 16-byte address past a 12-byte frame's end prints nothing


def test_no_volatile_field_is_one_tshark_names_by_value():
    """A learned program prints a volatile field as the number its bits hold; a field tshark prints by name
    (value strings, true/false texts) must stay in the shape, or a frame holding a named value would print
    its number.  Checked for every InfiniBand and MAD layer against tshark 4.0's labels."""
    import dissectors.ib as ib
    from dissectors.mad.base import REGISTRY
    from ibwire.report.packets import ws_labels
    from ibwire.report.packets.templates import VOLATILE

    named, checked = [], 0
    for layer, fields in VOLATILE.items():
        cls = REGISTRY.get(layer) or getattr(ib, layer, None)
        if getattr(cls, "ws_name", None) is None:
            continue  # scapy's own layers (Ether, IP, UDP …) and ERF: their volatile fields are addresses and ids
        for f in fields:
            key = "infiniband." + getattr(cls, "ws_alias", {}).get(f, f"{cls.ws_name}.{f}")
            checked += 1
            if key in ws_labels.VALUES or key in ws_labels.TFS:
                named.append(key)
    assert checked > 50 and not named, named
