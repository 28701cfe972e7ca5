"""Properties of the CLI's writers and readers (hypothesis): Ctrl-C or SIGTERM at any byte of any writer,
or while it syncs the file, leaves the old file or none; any prefix of a capture reads as a prefix of its
frames in every reader, never a crash nor a verdict on nothing; any spelling of an input as an output, or
of one output as another, is refused with nothing touched."""

import contextlib
import os
import shutil
import struct

from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_outputs_safe import cli

import ibwire.files.outfile as outfile
from ibwire.cli import Terminated
from ibwire.files import open_capture

CAPS = ROOT / "captures"
SMALL = CAPS / "atomics.pcap"  # 46 frames, 17 KB
POLICY = CAPS / "multitenant-breach.partitions.conf"
TENANTS = ROOT / "tests" / "audit" / "atomics.tenants.toml"  # a judged tenant pair: a clean audit exits 0
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


INTERRUPTS = {"Ctrl-C": (KeyboardInterrupt, 130), "SIGTERM": (Terminated, 143)}


class _Interrupting:
    """A file that takes `budget` bytes, then is interrupted in the middle of a write."""

    def __init__(self, f, budget, signal):
        self._f, self._left, self._signal = f, budget, signal

    def write(self, data):
        if len(data) > self._left:
            self._f.write(data[: self._left])
            raise self._signal
        self._left -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


@contextlib.contextmanager
def interrupted_after(budget, signal=KeyboardInterrupt, at="write"):
    """The writer's part file interrupted by `signal` after `budget` bytes, or (at="fsync") once it is
    all written, while it is synced to disk."""
    real_fdopen, real_fsync = outfile.os.fdopen, outfile.os.fsync

    def fdopen(*a, **k):
        f = real_fdopen(*a, **k)
        return _Interrupting(f, budget, signal) if at == "write" else f

    def fsync(fd):
        raise signal

    outfile.os.fdopen = fdopen
    if at == "fsync":
        outfile.os.fsync = fsync
    try:
        yield
    finally:
        outfile.os.fdopen, outfile.os.fsync = real_fdopen, real_fsync


WRITERS = {  # name -> (output file name, arguments after the output is known)
    "convert-pcap": ("out.pcap", lambda src, out: ["convert", src, "-o", out, "--link", "ib"]),
    "convert-pcapng": ("out.pcapng", lambda src, out: ["convert", src, "-o", out]),
    "synth": ("out.pcap", lambda src, out: ["synth", CAPS / "atomics.toml", "-w", out]),
    "export": ("out.parquet", lambda src, out: ["export", src, "-o", out]),
    "audit-report": (
        "out.html",
        lambda src, out: [
            "audit",
            src,
            "--policy",
            POLICY,
            "--tenants",
            TENANTS,
            "--report",
            out,
            "--fail-on",
            "breach",
        ],
    ),
    "audit-evidence": (
        "out.pcapng",
        lambda src, out: ["audit", src, "--policy", POLICY, "--tenants", TENANTS, "--evidence", out],
    ),
    "decode-w": ("out.pcap", lambda src, out: ["decode", src, "-w", out, "-Y", "bth"]),
}


@SETTINGS
@given(
    writer=st.sampled_from(sorted(WRITERS)),
    budget=st.integers(0, 40_000),
    old=st.booleans(),
    how=st.sampled_from(sorted(INTERRUPTS)),
    at=st.sampled_from(["write", "write", "fsync"]),
)
def test_an_interrupt_anywhere_leaves_the_old_file_or_none(tmp_path_factory, capsys, writer, budget, old, how, at):
    d = tmp_path_factory.mktemp("w")
    name, args = WRITERS[writer]
    src, out = d / "in.pcap", d / name
    shutil.copy(SMALL, src)
    if old:
        out.write_bytes(b"the previous output")
    signal, interrupted = INTERRUPTS[how]
    with interrupted_after(budget, signal, at):
        status = cli(*args(src, out))
    err = capsys.readouterr().err
    leftovers = sorted(p.name for p in d.iterdir()) == sorted(["in.pcap"] + ([name] if old or status == 0 else []))
    assert leftovers, sorted(p.name for p in d.iterdir())
    if status == interrupted:
        assert (
            err.strip().splitlines()[-1] == f"ibwire: interrupted by {how}; {out} not written "
            f"({'the old file is unchanged' if old else 'no partial file left'})"
        )
        assert (out.read_bytes() == b"the previous output") if old else not out.exists()
    else:  # the budget was more than the whole output
        assert status == 0 and at == "write", err
        whole = d / ("whole" + out.suffix)
        assert cli(*args(src, whole)) == 0
        capsys.readouterr()
        if writer != "audit-report":  # the report names its own output file
            assert out.read_bytes() == whole.read_bytes()
    assert src.read_bytes() == SMALL.read_bytes()


def _record_starts(raw: bytes) -> list:
    off, out = 24, []
    while off < len(raw):
        out.append(off)
        off += 16 + int.from_bytes(raw[off + 8 : off + 12], "little")
    return out


def _frames(path):
    cap = open_capture(str(path))
    return [(f.number, f.data, f.caplen, f.wirelen) for f in cap], cap


def _as_pcapng() -> bytes:
    """The small sample as pcapng (one interface), written by ibwire's own writer."""
    import io

    from ibwire.files.writers import PcapngWriter

    buf = io.BytesIO()
    w = PcapngWriter(buf)
    w.add_interface(open_capture(str(SMALL)).frames().__next__().linktype)
    for f in open_capture(str(SMALL)):
        w.write(f.data, f.time, wirelen=f.wirelen)
    return buf.getvalue()


def _block_starts(raw: bytes) -> list:
    """Offsets of the packet blocks of a little-endian pcapng file."""
    off, out = 0, []
    while off + 8 <= len(raw):
        btype, blen = struct.unpack_from("<II", raw, off)
        if btype == 6:
            out.append((off, blen))
        off += blen
    return out


PCAPNG = _as_pcapng()


READERS = {  # the other commands that read a capture: (arguments, output file or None)
    "decode": (lambda c, o: ["decode", c, "-T", "jsonl"], None),
    "flows": (lambda c, o: ["flows", c, "--format", "json"], None),
    "convert": (lambda c, o: ["convert", c, "-o", o, "--link", "ib"], "out.pcap"),
    "export": (lambda c, o: ["export", c, "-o", o], "out.parquet"),
    "decode-w": (lambda c, o: ["decode", c, "-w", o], "out.pcapng"),
}


@SETTINGS
@given(fmt=st.sampled_from(["pcap", "pcapng"]), reader=st.sampled_from(sorted(READERS)), data=st.data())
def test_any_prefix_reads_as_a_prefix_and_never_as_a_verdict_on_nothing(tmp_path_factory, capsys, fmt, reader, data):
    raw = SMALL.read_bytes() if fmt == "pcap" else PCAPNG
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    d = tmp_path_factory.mktemp("t")
    whole, _ = _frames(SMALL)
    part = d / f"cut.{fmt}"
    part.write_bytes(raw[:cut])
    args, name = READERS[reader]
    status = cli(*args(part, d / str(name)))
    said = capsys.readouterr().err
    assert status in (0, 2) and "internal error" not in said, said
    if name:  # a whole output, or none and no part file
        assert sorted(os.listdir(d)) == sorted([part.name] + [name] * (status == 0)), said
    if cut < 4:
        assert status == 2 and cli("stats", part) == 2
        capsys.readouterr()
        return
    got, cap = _frames(part)
    assert [g[:1] for g in got] == [w[:1] for w in whole[: len(got)]]
    for g, w in zip(got, whole):
        assert w[1].startswith(g[1]) and (g[1] == w[1] or g[2] < g[3])  # a cut record says it is cut
    if fmt == "pcap":
        starts = _record_starts(raw)
        assert len(got) == sum(1 for o in starts if o + 16 <= cut)  # every record whose header survived
        assert bool(cap.problems) == (cut not in starts + [len(raw)] and cut > 24 or 4 <= cut < 24)
    else:
        assert len(got) == sum(1 for o, n in _block_starts(raw) if o + n <= cut)  # every whole block
    assert cli("stats", part, "--format", "json") == 0
    import json

    assert json.loads(capsys.readouterr().out)["summary"]["packets"] == len(got)  # bulk and detail agree
    status = cli("audit", part, "--policy", POLICY, "--format", "json")
    out = capsys.readouterr()
    assert "internal error" not in out.err
    assert status in (0, 1, 2, 4)
    if not got:
        assert status == 2 and "no verdict" in out.err


def _aliases(d, src):
    """Other spellings of `src` (in directory `d`) a user could give as an output."""
    ext = src.suffix
    (d / "sub").mkdir()
    (d / f"link{ext}").symlink_to(src)
    os.link(src, d / f"hard{ext}")
    (d / "dirlink").symlink_to(d)
    return {
        "same": src,
        "dotdot": d / "sub" / ".." / src.name,
        "symlink": d / f"link{ext}",
        "hardlink": d / f"hard{ext}",
        "dirlink": d / "dirlink" / src.name,
        "dot": d / "." / src.name,
    }


@SETTINGS
@given(
    writer=st.sampled_from(sorted(WRITERS)),
    alias=st.sampled_from(["same", "dotdot", "symlink", "hardlink", "dirlink", "dot"]),
)
def test_any_spelling_of_an_input_as_output_is_refused(tmp_path_factory, capsys, writer, alias):
    d = tmp_path_factory.mktemp("a")
    name, args = WRITERS[writer]
    original = CAPS / "atomics.toml" if writer == "synth" else SMALL
    src = d / ("in" + os.path.splitext(name)[1])  # named as the output must be (export wants .parquet)
    shutil.copy(original, src)
    out = _aliases(d, src)[alias]
    made = sorted(os.listdir(d))
    argv = ["synth", src, "-w", out] if writer == "synth" else args(src, out)
    status = cli(*argv)
    err = capsys.readouterr().err
    assert status == 2 and "refusing to overwrite" in err, err
    assert sorted(os.listdir(d)) == made
    assert src.read_bytes() == original.read_bytes()


@SETTINGS
@given(
    writer=st.sampled_from(["export", "audit"]),
    alias=st.sampled_from(["same", "dotdot", "symlink", "hardlink", "dirlink", "dot"]),
)
def test_one_output_spelled_as_another_is_refused(tmp_path_factory, capsys, writer, alias):
    """export -o A --flows A, audit --report A --evidence A, in any spelling: refused, A untouched."""
    d = tmp_path_factory.mktemp("o")
    src = d / "in.pcap"
    shutil.copy(SMALL, src)
    first = d / ("first.parquet" if writer == "export" else "first.html")
    first.write_bytes(b"the previous output")
    second = _aliases(d, first)[alias]
    made = sorted(os.listdir(d))
    argv = (
        ["export", src, "-o", first, "--flows", second]
        if writer == "export"
        else ["audit", src, "--policy", POLICY, "--report", first, "--evidence", second]
    )
    status = cli(*argv)
    err = capsys.readouterr().err
    assert status == 2 and "are the same file" in err, err
    assert sorted(os.listdir(d)) == made and first.read_bytes() == b"the previous output"


@SETTINGS
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(_record_starts(SMALL.read_bytes())), st.integers(0, 15), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    )
)
def test_damaged_record_headers_read_alike_in_bulk_and_in_detail(tmp_path_factory, capsys, edits):
    """Any bytes of any record headers overwritten: stats (bulk reader, resync) and the detail reader that
    decode and audit use deliver the same number of frames, and the audit says what it could not read."""
    import json

    raw = bytearray(SMALL.read_bytes())
    for start, k, v in edits:
        raw[start + k] = v
    p = tmp_path_factory.mktemp("c") / "damaged.pcap"
    p.write_bytes(raw)
    got, cap = _frames(p)
    assert cli("stats", p, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["summary"]["packets"] == len(got)
    status = cli("audit", p, "--policy", POLICY, "--format", "json")
    out = capsys.readouterr()
    assert status in (0, 1, 2, 4) and "internal error" not in out.err
    if cap.skipped and out.out.strip():
        assert json.loads(out.out)["evidence"]["skipped"] == cap.skipped
