"""Bad input never crashes: 100,000 mutated real packets (truncation at every offset, random bit flips,
random bytes behind valid headers, every link type), written to one capture per link type, go through the
compiled bulk path (one record each, damage flagged), the full decode (never raising), and every output
format of `ibwire decode` — text, -V tree, -x dump, jsonl, json, ek, fields, csv — with one record per
input frame and no internal error."""
import csv
import io
import json
import random
from collections import defaultdict

import numpy as np
import pytest

from conftest import run_ibwire
from ibwire.decode import decode_frame
from ibwire.decode.stream import Stream
from ibwire.fast import read_all
from ibwire.fast import records as R
from ibwire.output.printer import Printer
from ibwire.output.tree import hex_dump, tree
from ibwire.readers import iter_frames
from ibwire.writers import PcapWriter
from tshark_oracle import PUBLIC

TOTAL = 100_000
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
        if kind == 0:                                   # truncation at every offset
            for cut in range(len(data)):
                yield f.linktype, bytes(data[:cut])
            continue
        if kind == 1:                                   # random bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data) * 8)
                data[i // 8] ^= 0x80 >> (i % 8)
        elif kind == 2:                                 # random bytes behind valid headers
            keep = rng.randrange(min(len(data), 80))
            data = data[:keep] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(200)))
        elif kind == 3:                                 # the same bytes under another link type
            yield rng.choice(linktypes), bytes(data)
            continue
        else:                                           # header fields set to extremes
            for _ in range(4):
                i = rng.randrange(len(data))
                data[i] = rng.choice((0, 0xFF, 0x7F, 0x80))
        yield f.linktype, bytes(data)


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    """One pcap per link type holding the 100,000 mutants (some with an original length beyond the
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


def test_every_output_format_survives_the_mutations(mutants):
    """Each mutant is decoded in full once (never raising), and printed in every format."""
    formats = ("text", "jsonl", "json", "ek", "fields", "csv")
    counts = dict.fromkeys(formats, 0)
    statuses = set()
    trees = dumps = 0
    for path, packets in mutants:
        printers = {f: Printer(f, "r", KEYS, f == "csv", "," if f == "csv" else "\t", "", KEYS) for f in formats}
        texts = {f: [p.start()] for f, p in printers.items()}
        for batch in Stream(str(path)):
            decoded = {}

            def details(i, batch=batch, decoded=decoded):
                if i not in decoded:
                    decoded[i] = decode_frame(batch.frame(i))
                return decoded[i]
            rows = np.arange(len(batch.rec))
            for i in rows.tolist():                         # the full decode, as -V and -x print it
                d = details(i)
                assert isinstance(d.summary, str)
                statuses.add(d.flat.get("icrc.status"))
                trees += tree(d).startswith("Frame ")
                dumps += bool(hex_dump(d.frame.data)) or not d.frame.data
            for f, p in printers.items():
                texts[f].append(p.batch(batch, rows, details))
        for f, p in printers.items():
            text = b"".join(texts[f] + [p.end()]).decode()
            n = len(packets)
            if f == "json":
                assert len(json.loads(text)) == n
            elif f == "jsonl":
                assert all(json.loads(line)["frame"] == k + 1 for k, line in enumerate(text.splitlines()))
                assert len(text.splitlines()) == n
            elif f == "ek":
                lines = text.splitlines()
                assert len(lines) == 2 * n and all(json.loads(x) for x in lines)
            elif f == "csv":
                assert len(list(csv.reader(io.StringIO(text)))) == n + 1
            else:
                assert len(text.splitlines()) == n
            counts[f] += n
    assert set(counts.values()) == {TOTAL} and trees == TOTAL and dumps == TOTAL
    assert {"bad", "truncated"} <= statuses          # the damage was noticed, not silently decoded as good


def test_cli_on_mutants_exits_cleanly(mutants):
    """As a user runs it: every format, -V and -x, on the mutants of the busiest link type."""
    path, packets = max(mutants, key=lambda m: len(m[1]))
    for args in (("-T", "jsonl"), ("-T", "ek"), ("-V", "-x", "-c", "500")):
        r = run_ibwire("decode", path, *args)
        assert r.returncode == 0 and "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-500:]
    assert len(r.stdout.split("\nFrame ")) >= 500
