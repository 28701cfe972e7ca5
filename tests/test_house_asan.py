"""The compiled decoder under AddressSanitizer: built with -fsanitize=address from the sources pyproject.toml
lists, it reads the fuzz corpus of tests/test_fuzz_decode.py (100,000 mutated real packets) with every
packet walled off by poisoned bytes, so any read outside a packet's captured bytes is reported; then the
same packets as whole pcap and pcapng files (record walk, decode, CRCs, grouping,
conversations, decode's line renderer), and damaged pcap/pcapng files.
Any AddressSanitizer report fails the test.  A canary run first proves a stray read is reported."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from test_fuzz_decode import TOTAL

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

HARNESS = r'''
import contextlib, ctypes, os, random, sys
from collections import defaultdict
import numpy as np
from ibwire.cli import main as cli
from ibwire.decode import _native
from ibwire.decode.scan import read_all
from ibwire.decode.batch import decode_batch
from ibwire.files.walk import Positions
from ibwire.analyze.flows import analyse
from ibwire.analyze.hashing import group_rows
from ibwire.analyze.stats import compute_file
from ibwire.files.writers import PcapngWriter, PcapWriter
from test_fuzz_decode import TOTAL, mutations, seeds

asan = ctypes.CDLL(None)
poison, unpoison = asan.__asan_poison_memory_region, asan.__asan_unpoison_memory_region
for f in (poison, unpoison):
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_size_t], None
GAP = 64

def walled(packets):
    """One buffer holding every packet 8-byte aligned, the bytes between packets poisoned."""
    offs, at = [], GAP
    for data, _, _ in packets:
        offs.append(at)
        at = (at + len(data) + GAP + 7) & ~7
    buf = np.zeros(at, np.uint8)
    for (data, _, _), o in zip(packets, offs):
        buf[o:o + len(data)] = np.frombuffer(data, np.uint8)
    base, ends = buf.ctypes.data, [0] + [o + len(d) for (d, _, _), o in zip(packets, offs)]
    for end, nxt in zip(ends, offs + [at]):
        poison(base + end, nxt - end)
    return buf, np.array(offs, np.int64)

def positions(offs, packets):
    n = len(packets)
    cols = dict(data=offs, caplen=np.array([len(d) for d, _, _ in packets], np.int64),
                wirelen=np.array([w for _, w, _ in packets], np.int64), time=np.zeros(n),
                linktype=np.array([lt for _, _, lt in packets], np.int64), frame=np.arange(1, n + 1))
    return Positions(**{k: cols.get(k) for k in Positions._fields})

def ibwire(*args):
    """The CLI in this process (so its compiled calls run under ASan), output discarded."""
    sys.argv = ["ibwire", *args]
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        try:
            cli()
        except SystemExit as e:
            assert e.code in (None, 0), f"ibwire {' '.join(args)}: exit {e.code}"

mode = sys.argv[1]
tmp = sys.argv[2]
if mode == "canary":         # a read of a poisoned byte must be reported: the check can fail
    data = bytes(range(64))
    buf, offs = walled([(data, 64, 247)])
    poison(buf.ctypes.data + int(offs[0]), 8)     # the LRH, read for every native IB packet (8-byte granule)
    decode_batch(buf, positions(offs, [(data, 64, 247)]))
    print("canary not reported")
    sys.exit(0)

rng = random.Random(2026)    # the fuzz corpus exactly as tests/test_fuzz_decode.py's fast-path test builds it
corpus = []
for n, (linktype, data) in enumerate(mutations(rng, seeds())):
    if n >= TOTAL:
        break
    corpus.append((data, len(data) + rng.choice((0, 0, 7)), linktype))
buf, offs = walled(corpus)
rec = decode_batch(buf, positions(offs, corpus))
unpoison(buf.ctypes.data, len(buf))
assert len(rec) == TOTAL
group_rows(rec, ["src", "dst", "destqp", "p_key"])
by_link = defaultdict(list)
for data, wirelen, linktype in corpus:
    by_link[linktype].append((data, wirelen))
files = []
for linktype, packets in by_link.items():
    path = f"{tmp}/mutants-{linktype}.pcap"
    with PcapWriter(path, linktype) as w:
        for data, wirelen in packets:
            w.write(data, 0.0, wirelen, flush=False)
    files.append(path)
    assert len(read_all(path)) == len(packets)
    compute_file(path, workers=1)             # the analyzers' compiled loops (grouping, conversations)
    analyse(path, workers=1)
ng = f"{tmp}/mutants.pcapng"  # pcapng: one interface per link type, packets of all of them interleaved
with PcapngWriter(ng) as w:
    iface = {lt: w.add_interface(lt) for lt in sorted(by_link)}
    for data, wirelen, linktype in corpus[:20_000]:
        w.write(data, 0.0, iface[linktype], wirelen, flush=False)
assert len(read_all(ng)) == 20_000
ibwire("decode", ng, "-c", "3000")          # the compiled line renderer, on mutants of every link type
ibwire("decode", ng, "-c", "3000", "-T", "fields", "-e", "frame.time_epoch", "-e", "bth.psn", "-e", "grh.sgid")
ibwire("decode", ng, "-c", "400", "--format", "jsonl")  # programs learned per shape: the frame ops
r = random.Random(7)         # damaged files: record headers and block lengths hit, files cut short
sources = [open(path, "rb").read()[:200_000] for path in (files[0], ng)]
for k in range(300):
    raw = bytearray(r.choice(sources))
    for _ in range(r.randint(1, 6)):
        i = r.randrange(len(raw))
        raw[i] = r.choice((0, 0xFF, r.randrange(256)))
    path = f"{tmp}/damaged.bin"
    open(path, "wb").write(bytes(raw[:r.randrange(24, len(raw) + 1)]))
    try:
        read_all(path)
    except Exception as e:
        if type(e).__name__ != "UserError":
            raise
print(f"clean: {len(rec)} packets walled off, {len(files)} mutant pcaps, a mutant pcapng, 300 damaged files")
'''


def _native_sources():
    ext = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ibwire"]["ext-modules"]
    (native,) = [e for e in ext if e["name"] == "ibwire.decode._native"]
    return native


@pytest.fixture(scope="module")
def asan_tree(tmp_path_factory):
    """A copy of the Python packages with the extension built under AddressSanitizer."""
    tree = tmp_path_factory.mktemp("asan")
    for pkg in ("ibwire", "dissectors"):
        shutil.copytree(ROOT / pkg, tree / pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    native = _native_sources()
    out = tree / "ibwire" / "decode" / f"_native{sysconfig.get_config_var('EXT_SUFFIX')}"
    cc = [
        "gcc",
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        "-I",
        sysconfig.get_paths()["include"],
        *(str(ROOT / s) for s in native["sources"]),
        *(f"-l{lib}" for lib in native.get("libraries", [])),
        "-o",
        str(out),
    ]
    subprocess.run(cc, check=True, capture_output=True, text=True, timeout=300)
    libasan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert os.path.isabs(libasan), "gcc has no libasan (Debian: libasan8, pulled in by gcc)"
    return tree, libasan


def _run(tree, libasan, mode, tmp):
    env = dict(
        os.environ,
        LD_PRELOAD=libasan,
        PYTHONMALLOC="malloc",
        PYTHONPATH=f"{tree}:{TESTS}",
        ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:exitcode=86",
    )
    return subprocess.run(
        [sys.executable, "-c", HARNESS, mode, str(tmp)], env=env, cwd=tmp, capture_output=True, text=True, timeout=600
    )


def test_asan_reports_a_read_of_poisoned_bytes(asan_tree, tmp_path):
    r = _run(*asan_tree, "canary", tmp_path)
    assert r.returncode == 86 and "ERROR: AddressSanitizer: use-after-poison" in r.stderr, r.stdout + r.stderr


def test_fuzz_corpus_under_asan_reads_nothing_outside_the_packets(asan_tree, tmp_path):
    r = _run(*asan_tree, "corpus", tmp_path)
    assert "AddressSanitizer" not in r.stderr, r.stderr[-4000:]
    assert r.returncode == 0, r.stderr[-4000:]
    assert f"clean: {TOTAL} packets walled off" in r.stdout
