"""Writers leave a whole file or the old one, never overwrite an input, and say so in their exit status:
convert, synth, export, audit --report, as a user runs them (interrupts, full disks, aliasing, races)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from ibwire.files import open_capture

CAPS = ROOT / "captures"
BREACH = CAPS / "multitenant-breach.pcap"
POLICY = CAPS / "multitenant-breach.partitions.conf"
EXE = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"


def cli(*args):
    """Run the CLI in this process as `ibwire ARGS`; returns the exit status."""
    import ibwire.files.outfile

    ibwire.files.outfile._finished.clear()  # what a fresh process would know of its outputs
    ibwire.files.outfile._abandoned.clear()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    argv, sys.argv = sys.argv, ["ibwire", *map(str, args)]
    try:
        from ibwire.cli import main

        main()
        return 0
    except SystemExit as e:
        return e.code
    finally:
        sys.argv = argv
        for s, h in saved.items():
            signal.signal(s, h)


def _many_frames(path: Path, times: int) -> Path:
    """The breach sample's records repeated: a capture that takes convert a second or so."""
    raw = BREACH.read_bytes()
    path.write_bytes(raw[:24] + raw[24:] * times)
    return path


@pytest.mark.parametrize("make_alias", ["same", "symlink", "dotdot", "hardlink"])
def test_convert_refuses_to_overwrite_its_input(tmp_path, capsys, make_alias):
    src = tmp_path / "in.pcap"
    shutil.copy(BREACH, src)
    (tmp_path / "d").mkdir()
    out = {"same": lambda: src, "dotdot": lambda: tmp_path / "d" / ".." / "in.pcap"}.get(make_alias, lambda: None)()
    if make_alias == "symlink":
        out = tmp_path / "link.pcap"
        out.symlink_to(src)
    elif make_alias == "hardlink":
        out = tmp_path / "hard.pcap"
        os.link(src, out)
    assert cli("convert", src, "-o", out) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert src.read_bytes() == BREACH.read_bytes()


def test_every_writer_refuses_its_inputs(tmp_path, capsys):
    src = tmp_path / "in.pcap"
    shutil.copy(BREACH, src)
    scen = tmp_path / "s.toml"
    shutil.copy(CAPS / "atomics.toml", scen)
    policy = tmp_path / "p.conf"
    shutil.copy(CAPS / "multitenant-breach.partitions.conf", policy)
    before = {p: p.read_bytes() for p in (src, scen, policy)}
    cases = [
        ("synth", scen, "-w", scen),
        ("export", src, "-o", tmp_path / "x.parquet", "--flows", tmp_path / "x.parquet"),
        ("audit", src, "--policy", policy, "--report", src),
        ("audit", src, "--policy", policy, "--report", policy),
    ]
    for args in cases:
        assert cli(*args) == 2, args
        err = capsys.readouterr().err
        assert "refusing" in err or "same file" in err, (args, err)
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / "x.parquet").exists()


def test_standard_output_carries_one_thing(capsys):
    """`-` as an output is standard output, so nothing else may be printed there: refused before reading."""
    for args in (
        ["decode", BREACH, "-w", "-", "-P"],
        ["audit", BREACH, "--policy", POLICY, "--report", "-"],
        ["audit", BREACH, "--policy", POLICY, "--evidence", "-"],
    ):
        assert cli(*args) == 2, args
        out = capsys.readouterr()
        assert not out.out and "standard output" in out.err and out.err.count("\n") == 1, out


def _wait_for_part(target: Path, proc, timeout=60.0):
    """The writer's part file (`.NAME.<stamp>.ibwire-part`), once the writer holds it (its lock taken)."""
    import fcntl

    end = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "the writer finished before it could be interrupted"
        assert time.monotonic() < end
        for part in target.parent.glob(f".{target.name}.*.ibwire-part"):
            try:
                with open(part, "rb") as f:
                    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return part
            except FileNotFoundError:
                pass
        time.sleep(0.002)


SIGNALS = {signal.SIGINT: (130, "Ctrl-C"), signal.SIGTERM: (143, "SIGTERM")}
MID_WRITE = {  # writer: (output, a long write of `big` inputs, a short one, the signal that interrupts it)
    "convert": (
        "out.pcap",
        lambda big: ["convert", big["pcap"], "--link", "ib", "-o"],
        ["convert", BREACH, "-o"],
        signal.SIGINT,
    ),
    "export": ("out.parquet", lambda big: ["export", big["pcap"], "-o"], ["export", BREACH, "-o"], signal.SIGTERM),
    "synth": (
        "out.pcap",
        lambda big: ["synth", big["toml"], "-w"],
        ["synth", CAPS / "atomics.toml", "-w"],
        signal.SIGINT,
    ),
    "decode": ("out.pcap", lambda big: ["decode", big["pcap"], "-w"], ["decode", BREACH, "-w"], signal.SIGTERM),
    "audit": (
        "out.html",
        lambda big: ["audit", BREACH, "--policy", POLICY, "--report"],  # HTML: ~0.3 s
        ["audit", CAPS / "atomics.pcap", "--policy", POLICY, "--report"],
        signal.SIGINT,
    ),
}


@pytest.mark.parametrize("writer", sorted(MID_WRITE))
def test_a_writer_interrupted_mid_write_keeps_the_old_file_and_refuses_a_second(tmp_path, writer):
    """Each writer, stopped (SIGSTOP) while its part file is open: a second ibwire writing the same file is
    refused; then Ctrl-C (130) or SIGTERM (143) leaves the old file, no part file, and one line saying so."""
    name, long, short, sig = MID_WRITE[writer]
    big = {"pcap": _many_frames(tmp_path / "big.pcap", 60), "toml": tmp_path / "big.toml"}
    big["toml"].write_text((CAPS / "atomics.toml").read_text().replace("count = 4\n", "count = 5000\n"))
    out = tmp_path / name
    out.write_bytes(b"the old output")
    p = subprocess.Popen(
        [EXE, *map(str, long(big)), str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    part = _wait_for_part(out, p)
    p.send_signal(signal.SIGSTOP)
    try:
        assert part.exists(), "the writer finished before it could be stopped"
        second = subprocess.run([EXE, *map(str, short), str(out)], capture_output=True, text=True, timeout=120)
        assert second.returncode == 2
        assert (
            second.stderr == f"ibwire: {out} is being written by another process right now; try again when it is done\n"
        )
    finally:
        p.send_signal(sig)
        p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=120)
    status, word = SIGNALS[sig]
    assert p.returncode == status
    assert err.strip().splitlines() == [f"ibwire: interrupted by {word}; {out} not written (the old file is unchanged)"]
    assert out.read_bytes() == b"the old output"
    assert sorted(os.listdir(tmp_path)) == sorted(["big.pcap", "big.toml", name])


def test_output_to_a_full_disk_is_an_error(tmp_path):
    for args in (
        ["stats", BREACH, "--format", "json"],
        ["decode", BREACH, "--format", "jsonl", "-c", "40"],
        ["audit", BREACH, "--policy", CAPS / "multitenant-breach.partitions.conf", "--format", "json"],
    ):
        with open("/dev/full", "w") as full:
            r = subprocess.run([EXE, *map(str, args)], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert r.returncode == 2, (args, r.stderr)
        assert "No space left on device" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_second_writer_of_one_file_is_refused(tmp_path, capsys):
    """While another process writes out.pcap (it holds its part file's lock), a second writer is refused."""
    import fcntl

    out = tmp_path / "out.pcap"
    out.write_bytes(b"old")
    with open(tmp_path / f".out.pcap.{time.monotonic_ns():016x}-00000000.ibwire-part", "wb") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        assert cli("convert", BREACH, "-o", out) == 2
        assert "being written by another process" in capsys.readouterr().err
    assert out.read_bytes() == b"old"
    assert cli("convert", BREACH, "-o", out) == 0  # a stale part file (a killed writer) is no obstacle
    assert sorted(os.listdir(tmp_path)) == ["out.pcap"]


def test_concurrent_writers_leave_one_whole_file(tmp_path):
    a = _many_frames(tmp_path / "a.pcap", 30)
    b = tmp_path / "b.pcap"
    shutil.copy(BREACH, b)
    out = tmp_path / "out.pcap"
    procs = [
        subprocess.Popen(
            [EXE, "convert", str(src), "-o", str(out), "--link", "ib"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for src in (a, b)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert all(rc == 0 or (rc == 2 and "being written by another process" in err) for _, err, rc in results)
    whole = {}
    for src in (a, b):
        assert cli("convert", src, "-o", tmp_path / f"{src.stem}.ib", "--link", "ib") == 0
        whole[src.stem] = (tmp_path / f"{src.stem}.ib").read_bytes()
    claimed = [k for k, (_, _, rc) in zip("ab", results) if rc == 0]
    assert claimed and out.read_bytes() in [whole[k] for k in claimed]


def test_sigterm_ends_a_capture_with_143_on_the_ibdump_standin(tmp_path):
    """No ConnectX here: the capture runs against the ibdump stand-in (tests/standin) on a fake sysfs."""
    sys.path.insert(0, str(ROOT / "tests" / "standin"))
    import fake_sysfs

    env = fake_sysfs.standin_env(tmp_path, STANDIN_LIDS="0x3>0x12,0x12>0x3")
    out = tmp_path / "o.pcap"
    p = subprocess.Popen([EXE, "capture", "--pf", "mlx5_0", "-w", str(out)], env=env, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "Ctrl-C stops" in line:
            break
    p.send_signal(signal.SIGTERM)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 143
    import re

    m = re.search(
        rf"stopped by SIGTERM; (\d+) packets kept in {re.escape(str(out))}, a valid capture; "
        "everything armed was undone",
        err,
    )
    assert m, err
    assert len(list(open_capture(str(out)))) == int(m.group(1))  # the file holds what the line says


def test_the_null_device_is_written_through_and_links_refused(tmp_path, capsys):
    """/dev/null stays a device (a rename over it, as root, would replace it); any other device, and a
    symlinked output, is refused with one sentence and the file the link names is unchanged."""
    assert cli("convert", BREACH, "-o", "/dev/null") == 0
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    capsys.readouterr()
    assert cli("convert", BREACH, "-o", "/dev/full") == 2
    assert (
        capsys.readouterr().err == "ibwire: /dev/full is a device; ibwire writes only regular files "
        "(- for standard output)\n"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "real.pcap").write_bytes(b"old")
    (tmp_path / "out.pcap").symlink_to(tmp_path / "data" / "real.pcap")
    assert cli("convert", BREACH, "-o", tmp_path / "out.pcap") == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert (tmp_path / "data" / "real.pcap").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["data", "out.pcap"]


def test_a_killed_writers_part_file_is_removed_by_the_next_writer(tmp_path):
    """SIGKILL leaves `.out.pcap.<stamp>.ibwire-part`; the next ibwire writer in that directory (to another file)
    removes it, and leaves alone a part file a live writer still holds."""
    import fcntl

    src = _many_frames(tmp_path / "in.pcap", 120)
    out = tmp_path / "out.pcap"
    p = subprocess.Popen(
        [EXE, "convert", str(src), "-o", str(out), "--link", "ib"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    part = _wait_for_part(out, p)
    p.kill()
    assert p.wait(timeout=60) == -signal.SIGKILL and part.exists() and not out.exists()
    live = tmp_path / ".busy.pcap.ibwire-part"
    with open(live, "wb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = subprocess.run(
            [EXE, "synth", str(CAPS / "atomics.toml"), "-w", str(tmp_path / "other.pcap")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(tmp_path)) == [".busy.pcap.ibwire-part", "in.pcap", "other.pcap"]


def test_convert_to_standard_output_is_a_clean_pcap(tmp_path):
    """What convert says goes to stderr; stdout is the pcap alone, as tshark reads it."""
    with open(tmp_path / "stdout.pcap", "wb") as stdout:
        r = subprocess.run(
            [EXE, "convert", str(BREACH), "-o", "-"], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("wrote 235 packets to ")
    t = subprocess.run(
        ["tshark", "-r", str(tmp_path / "stdout.pcap"), "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert t.returncode == 0 and t.stdout.split() == [str(n) for n in range(1, 236)], t.stderr


def test_a_real_full_disk_keeps_the_old_file_or_leaves_none(tmp_path):
    """Every writer onto a real full filesystem: a 256 KiB tmpfs, mounted in a private mount namespace
    (unshare -m, root; it disappears with the namespace) and filled to ~12 KiB free: exit 2, one sentence,
    the old file unchanged (every writer) or no file at all (two of them: the same code), no part file."""
    import shlex

    disk = tmp_path / "disk"
    disk.mkdir()
    b = CAPS / "multitenant-breach"
    writers = {
        "c.pcap": ["convert", f"{b}.pcap", "-o"],
        "e.parquet": ["export", f"{b}.pcap", "-o"],
        "s.pcap": ["synth", CAPS / "atomics.toml", "-w"],
        "d.pcap": ["decode", f"{b}.pcap", "-w"],
        "r.html": ["audit", f"{b}.pcap", "--policy", f"{b}.partitions.conf", "--report"],
    }
    q = shlex.quote
    script = [f"mount -t tmpfs -o size=256k ibwire-test {q(str(disk))} || exit 99"]
    runs = [(name, True) for name in writers] + [("c.pcap", False), ("e.parquet", False)]
    for name, old in runs:
        args = writers[name]
        out, log = disk / name, tmp_path / f"{name}.{old}"
        script += [
            f"printf 'the old output' > {q(str(out))}" if old else ":",
            f"dd if=/dev/zero of={q(str(disk / 'filler'))} bs=4k count=60 2>/dev/null",
            " ".join(q(str(a)) for a in [EXE, *args, out]) + f" >/dev/null 2>{q(str(log))}.err",
            f"echo $? > {q(str(log))}.status; ls -A {q(str(disk))} > {q(str(log))}.ls",
            f"cat {q(str(out))} > {q(str(log))}.old 2>/dev/null",
            f"rm -f {q(str(out))} {q(str(disk / 'filler'))}",
        ]
    r = subprocess.run(["unshare", "-m", "sh", "-c", "\n".join(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for name, old in runs:
        log = tmp_path / f"{name}.{old}"
        said = Path(f"{log}.err").read_text()
        assert Path(f"{log}.status").read_text() == "2\n", (name, said)
        assert (
            said == f"ibwire: cannot write {disk / name} (No space left on device); "
            f"{'the old file is unchanged' if old else 'no file was left'}\n"
        ), said
        assert Path(f"{log}.ls").read_text().split() == sorted(["filler"] + [name] * old)
        assert Path(f"{log}.old").read_text() == ("the old output" if old else "")
    assert os.listdir(disk) == []  # the tmpfs went with its namespace


def test_ctrl_c_just_after_the_part_file_is_locked_says_not_written(tmp_path, monkeypatch):
    """Ctrl-C landing between the part file's lock and the first byte (here: while the file object is made)
    still reports the output as not written, the old file unchanged, and leaves no part file."""
    import ibwire.files.outfile as outfile

    outfile._finished.clear()
    outfile._abandoned.clear()
    out = tmp_path / "out.txt"
    out.write_text("old")

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(outfile.os, "fdopen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with outfile.output_file(out, "w"):
            pass
    assert outfile.left_behind() == f"{out} not written (the old file is unchanged)"
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


FAKE_LIBRARY = """
import os, signal, sys, time
import ibwire.cli as cli

def app(standalone_mode):  # stands in for a library that turns the signal's exception into another
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    except BaseException:
        raise TypeError("expected a message argument")

cli.app = app
sys.argv = ["ibwire", "stats", "x.pcap"]
cli.main()
"""


def test_sigterm_turned_into_another_error_by_a_fake_library_still_exits_143():
    """SIGTERM is 143 and 'interrupted', not an internal error, even when the exception it raised is replaced
    on its way up (seen once in CPython's own machinery during `export` under load)."""
    r = subprocess.run([sys.executable, "-c", FAKE_LIBRARY], capture_output=True, text=True, timeout=60)
    assert r.returncode == 143, r.stderr
    assert r.stderr.startswith("ibwire: interrupted by SIGTERM; ") and "internal error" not in r.stderr
