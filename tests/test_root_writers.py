"""Every writer run as root (as CI runs) into a shared sticky directory, mode 1777 like /tmp, where another
user has planted things: that user is uid 4242, which has no passwd entry (nothing is added to /etc); the
planted files are chowned to it.  The victim is a root-only file outside the shared directory.  Whatever is
planted, the victim keeps its bytes and mode, nothing hangs (each command has a time limit), no part file is
left, and a refused output exits 2 with one sentence; names planted where the old writers put their part
files do not stop a writer at all."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

CAPS = ROOT / "captures"
BREACH = CAPS / "multitenant-breach"
EXE = Path(sys.executable).parent / "ibwire"
OTHER = 4242  # another user: a uid with no passwd entry
SECRET = b"root's secret\n"

WRITERS = {  # writer -> (output name, arguments before the output, exit status of a completed run)
    "decode -w": ("out.pcap", ["decode", f"{BREACH}.pcap", "-w"], 0),
    "convert -o": ("out.pcap", ["convert", f"{BREACH}.pcap", "-o"], 0),
    "synth -w": ("out.pcap", ["synth", CAPS / "atomics.toml", "-w"], 0),
    "export -o": ("out.parquet", ["export", CAPS / "atomics.pcap", "-o"], 0),
    "flows --report": ("out.html", ["flows", CAPS / "atomics.pcap", "--report"], 0),
    "fabric --report": ("out.html", ["fabric", f"{BREACH}.pcap", "--report"], 0),
    "audit --report": ("out.html", ["audit", f"{BREACH}.pcap", "--policy", f"{BREACH}.partitions.conf", "--report"], 1),
    "audit --evidence": (
        "out.pcapng",
        ["audit", f"{BREACH}.pcap", "--policy", f"{BREACH}.partitions.conf", "--evidence"],
        1,
    ),
    "extcap --install": ("ibwire-extcap", ["extcap", "--install"], 0),  # into $XDG_CONFIG_HOME/wireshark/extcap
}


def _mine(path: Path) -> None:
    """Give `path` to the other user (a symbolic link itself, not what it names)."""
    os.chown(path, OTHER, OTHER, follow_symlinks=False)


def _plant(case: str, shared: Path, name: str, victim: Path):
    """What the other user leaves at (or beside) the output; returns (output path, what stderr must say)."""
    out = shared / name
    if case == "symlink":
        out.symlink_to(victim)
    elif case == "fifo":
        os.mkfifo(out)
    elif case == "device":  # the zero device: opening it for writing would work
        os.mknod(out, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    elif case == "directory":
        out.mkdir(mode=0o777)
    elif case == "their file":
        out.write_bytes(b"theirs")
    elif case == "linked directory":  # a link to the victim's directory, which holds a file of that name
        link = shared / ("extcap" if name == "ibwire-extcap" else "in")
        link.symlink_to(victim.parent)
        _mine(link)
        return link / name, f"{link} passes through {link.name}, a symbolic link of another user (uid {OTHER})"
    else:  # the names the old writers gave their part files, and new ones
        for planted in (f".{name}.ibwire-part", f".{name}.tmp"):
            (shared / planted).symlink_to(victim)
            _mine(shared / planted)
        for planted in (f".{name}.0000000000000000-00000000.ibwire-part", ".z.ibwire-part"):
            os.mkfifo(shared / planted)
            _mine(shared / planted)
        return out, None
    _mine(out)
    kind = {"symlink": "a symbolic link", "fifo": "a FIFO", "device": "a device", "directory": "a directory"}
    return out, (
        f"{out} is {kind[case]}"
        if case in kind
        else f"{out} belongs to another user (uid {OTHER}) in a shared directory"
    )


CASES = ["symlink", "fifo", "device", "directory", "their file", "linked directory", "part names"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_root_writer_never_writes_where_another_user_points_it(tmp_path, writer, case):
    assert os.geteuid() == 0, "these tests are about ibwire run as root, as CI runs them"
    name, args, done = WRITERS[writer]
    victim = tmp_path / "private" / name  # root-only, outside the shared directory
    victim.parent.mkdir(mode=0o700)
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    config = tmp_path / "config"
    shared = tmp_path / "shared"
    if writer == "extcap --install":  # the launcher goes to $XDG_CONFIG_HOME/wireshark/extcap
        shared = config / "wireshark" / ("" if case == "linked directory" else "extcap")
    shared.mkdir(parents=True)
    shared.chmod(0o1777)
    out, said = _plant(case, shared, name, victim)
    before = sorted(os.listdir(shared))
    env = dict(os.environ, XDG_CONFIG_HOME=str(config))
    argv = [str(EXE), *map(str, args)] + ([] if writer == "extcap --install" else [str(out)])
    r = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120, env=env)
    assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert sorted(os.listdir(victim.parent)) == [name]
    if said is None:  # nothing at the output itself: it is written
        assert r.returncode == done, r.stderr
        assert sorted(os.listdir(shared)) == sorted(before + [name])
        st = os.lstat(out)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and os.path.getsize(out) > 0
        assert stat.S_IMODE(st.st_mode) & 0o111 == (0o111 if writer == "extcap --install" else 0)  # a launcher
        return
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"ibwire: {said}") and r.stderr.count("\n") == 1, r.stderr
    assert sorted(os.listdir(shared)) == before  # no part file left, nothing replaced
    if case == "their file":
        assert out.read_bytes() == b"theirs"


def test_a_stale_part_file_of_another_user_in_a_shared_directory_is_left_alone(tmp_path):
    """The cleaner removes the part files dead writers left, but in a sticky directory only its own: a regular
    file of another user named like a part file stays (as the kernel's sticky bit would have it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / ".x.pcap.0000000000000001-00000000.ibwire-part"
    theirs.write_bytes(b"theirs")
    _mine(theirs)
    ours = shared / ".y.pcap.0000000000000001-00000000.ibwire-part"
    ours.write_bytes(b"ours, from a killed writer")
    r = subprocess.run(
        [str(EXE), "convert", f"{BREACH}.pcap", "-o", str(shared / "out.pcap")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(shared)) == [theirs.name, "out.pcap"]
    assert theirs.read_bytes() == b"theirs"


@pytest.mark.parametrize("case", ["symlink", "fifo", "device", "their file", "linked directory"])
def test_capture_w_on_the_ibdump_standin_is_refused_before_anything_starts(tmp_path, case):
    """No ConnectX here: `capture -w` runs against the ibdump stand-in (tests/standin) on a fake sysfs; a planted
    output is refused in one sentence before the capture engine is started (the stand-in logs every start)."""
    sys.path.insert(0, str(ROOT / "tests" / "standin"))
    import fake_sysfs

    victim = tmp_path / "private" / "o.pcap"
    victim.parent.mkdir(mode=0o700)
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    out, said = _plant(case, shared, "o.pcap", victim)
    before = sorted(os.listdir(shared))
    env = fake_sysfs.standin_env(tmp_path, STANDIN_LIDS="0x3>0x12")
    r = subprocess.run(
        [str(EXE), "capture", "--pf", "mlx5_0", "-w", str(out), "-c", "1"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.startswith(f"ibwire: {said}") and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "argv.log").exists()
    assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert sorted(os.listdir(shared)) == before


@pytest.mark.parametrize("mode", [0o1777, 0o775])
def test_a_capture_ring_is_refused_in_a_directory_others_can_write(tmp_path, mode):
    """`-C` makes dumpcap name each ring file as it reaches it, by name: a name planted ahead in a directory
    another user (or group) can write would be followed, so the ring is refused there before anything runs."""
    sys.path.insert(0, str(ROOT / "tests" / "standin"))
    import fake_sysfs

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    env = fake_sysfs.standin_env(tmp_path, STANDIN_LIDS="0x3>0x12")
    r = subprocess.run(
        [str(EXE), "capture", "--pf", "mlx5_0", "-w", str(shared / "ring.pcapng"), "-C", "1", "-c", "1"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "directory only you can write" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "argv.log").exists() and os.listdir(shared) == []
