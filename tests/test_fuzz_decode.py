"""Bad input never crashes: 40,000 mutated real packets (truncation at every offset, random bit flips,
random bytes behind valid headers, every link type), written to one capture per link type, go through the
compiled bulk path (one record each, damage flagged), the full decode (never raising), and every output
format of `ibwire decode` — text, -V tree, -x dump, jsonl, json, ek, fields, csv — with one record per
input frame and no internal error."""

import csv
import io
import json
import multiprocessing
import os
import random
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest
from conftest import run_ibwire
from tshark_oracle import PUBLIC

from ibwire.decode import decode_frame
from ibwire.decode import records as R
from ibwire.decode.scan import read_all
from ibwire.decode.stream import Stream
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter
from ibwire.report.packets.printer import Printer
from ibwire.report.packets.tree import hex_dump, tree

TOTAL = 40_000
KEYS = ["frame.number", "bth.psn", "ip.addr", "eth.src", "mad.transactionid", "icrc.status", "frame.time_relative"]


def seeds():
    out = []
    for path in sorted(PUBLIC.glob("*.pcap")):
        frames = list(iter_frames(path))
        out += random.Random(path.name).sample(frames, min(12, len(frames)))
    return out


def mutations(rng, seed_frames):
    linktypes = [1, 197, 242, 247, 113, 276, 9999]
    while True:
        f = rng.choice(seed_frames)
        data = bytearray(f.data)
        kind = rng.randrange(5)
        if kind == 0:  # truncation at every offset
            for cut in range(len(data)):
                yield f.linktype, bytes(data[:cut])
            continue
        if kind == 1:  # random bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data) * 8)
                data[i // 8] ^= 0x80 >> (i % 8)
        elif kind == 2:  # random bytes behind valid headers
            keep = rng.randrange(min(len(data), 80))
            data = data[:keep] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(200)))
        elif kind == 3:  # the same bytes under another link type
            yield rng.choice(linktypes), bytes(data)
            continue
        else:  # header fields set to extremes
            for _ in range(4):
                i = rng.randrange(len(data))
                data[i] = rng.choice((0, 0xFF, 0x7F, 0x80))
        yield f.linktype, bytes(data)


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    """One pcap per link type holding the 40,000 mutants (some with an original length beyond the
    captured bytes): [(path, packets)]."""
    rng = random.Random(2026)
    by_link = defaultdict(list)
    for n, (linktype, data) in enumerate(mutations(rng, seeds())):
        if n >= TOTAL:
            break
        by_link[linktype].append((data, len(data) + rng.choice((0, 0, 7))))
    out = []
    folder = tmp_path_factory.mktemp("mutants")
    for linktype, packets in by_link.items():
        path = folder / f"mutants-{linktype}.pcap"
        with PcapWriter(str(path), linktype) as w:
            for i, (data, wirelen) in enumerate(packets):
                w.write(data, 1700000000 + i * 1e-6, wirelen, flush=False)
        out.append((path, packets))
    assert sum(len(p) for _, p in out) == TOTAL
    return out


def test_fast_path_survives_the_mutations(mutants):
    """The compiled decoder reads every mutant: one record each, and damage is reported, not decoded as good."""
    statuses, flags = set(), 0
    for path, packets in mutants:
        rec = read_all(str(path))
        assert len(rec) == len(packets)
        assert ((rec["flags"] & R.F_TRUNCATED) > 0).sum() >= sum(wl > len(d) for d, wl in packets)
        statuses |= set(np.unique(rec["icrc"]).tolist())
        flags |= int(np.bitwise_or.reduce(rec["flags"])) if len(rec) else 0
    assert {R.BAD, R.TRUNC, R.GOOD} <= statuses
    assert flags & R.F_MALFORMED and flags & R.F_TRUNCATED


FORMATS = ("text", "jsonl", "json", "ek", "fields", "csv")


def _print_share(path, part: int, parts: int):
    """Rows `part`, `part + parts`, ... of every batch of `path`, decoded in full (as -V and -x print them)
    and printed in every format, each format's text checked whole: (rows per format, jsonl frame numbers,
    ICRC statuses, trees, dumps)."""
    printers = {f: Printer(f, "r", KEYS, f == "csv", "," if f == "csv" else "\t", "", KEYS) for f in FORMATS}
    texts = {f: [p.start()] for f, p in printers.items()}
    statuses, trees, dumps, n = set(), 0, 0, 0
    for batch in Stream(str(path)):
        decoded = {}

        def details(i, batch=batch, decoded=decoded):
            if i not in decoded:
                decoded[i] = decode_frame(batch.frame(i))
            return decoded[i]

        rows = np.arange(part, len(batch.rec), parts)
        for i in rows.tolist():
            d = details(i)
            assert isinstance(d.summary, str)
            statuses.add(d.flat.get("icrc.status"))
            trees += tree(d).startswith("Frame ")
            dumps += bool(hex_dump(d.frame.data)) or not d.frame.data
        n += len(rows)
        for f, p in printers.items():
            texts[f].append(p.batch(batch, rows, details))
    counts, numbers = {}, []
    for f, p in printers.items():
        text = b"".join(texts[f] + [p.end()]).decode()
        if f == "json":
            counts[f] = len(json.loads(text))
        elif f == "jsonl":
            numbers = [json.loads(line)["frame"] for line in text.splitlines()]
            counts[f] = len(numbers)
        elif f == "ek":
            lines = text.splitlines()
            assert all(json.loads(x) for x in lines)
            counts[f] = len(lines) // 2
        elif f == "csv":
            counts[f] = len(list(csv.reader(io.StringIO(text)))) - 1
        else:
            counts[f] = len(text.splitlines())
        assert counts[f] == n, (path, f)
    return counts, numbers, statuses, trees, dumps


def test_every_output_format_survives_the_mutations(mutants):
    """Each mutant is decoded in full once (never raising), and printed in every format; the rows are
    shared between one process per core."""
    parts = max(1, min(4, os.cpu_count() or 1))
    jobs = [(path, len(packets), k) for path, packets in mutants for k in range(parts)]
    with ProcessPoolExecutor(parts, mp_context=multiprocessing.get_context("fork")) as pool:
        done = list(pool.map(_print_share, [j[0] for j in jobs], [j[2] for j in jobs], [parts] * len(jobs)))
    counts, statuses, trees, dumps, numbers = dict.fromkeys(FORMATS, 0), set(), 0, 0, defaultdict(list)
    for (path, _n, _), (c, nums, st, tr, du) in zip(jobs, done):
        counts = {f: counts[f] + c[f] for f in FORMATS}
        numbers[path] += nums
        statuses |= st
        trees += tr
        dumps += du
    for path, packets in mutants:  # jsonl numbers each input frame once, from 1
        assert sorted(numbers[path]) == list(range(1, len(packets) + 1))
    assert set(counts.values()) == {TOTAL} and trees == TOTAL and dumps == TOTAL
    assert {"bad", "truncated"} <= statuses  # the damage was noticed, not silently decoded as good


def test_cli_on_mutants_exits_cleanly(mutants):
    """As a user runs it: every format, -V and -x, on the mutants of the busiest link type (the three runs
    side by side)."""
    path, packets = max(mutants, key=lambda m: len(m[1]))
    runs = [("-T", "jsonl"), ("-T", "ek"), ("-V", "-x", "-c", "500")]
    with ThreadPoolExecutor(len(runs)) as pool:
        done = list(pool.map(lambda args: run_ibwire("decode", path, *args), runs))
    for r in done:
        assert r.returncode == 0 and "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-500:]
    assert len(done[-1].stdout.split("\nFrame ")) >= 500
