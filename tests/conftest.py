import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
PUBLIC = ROOT.parent / "shared" / "captures" / "public"
NO_PUBLIC = (
    f"needs the public captures (real RDMA traffic recorded by others; their sources are listed in its "
    f"MANIFEST.md), read from {PUBLIC}: ../shared beside the repository, as CI lays it out"
)

import litter  # noqa: E402  (tests/litter.py, found through the sys.path entry above)

# `./dev test` runs the suite in two rounds: the modules below one at a time (-m serial), the rest on both
# cores (pytest-xdist, -m "not serial", a module per worker).  Serial: QEMU labs that need the machine's whole
# CPU to keep RDMA timers, network namespaces, veth pairs and tc filters, extcap installs into the run's one
# home folder, and tests that measure wall time or peak memory, or watch the run's own writes.
SERIAL = {
    "test_lab_rdma",
    "test_lab_health",
    "test_lab_nvmeof",
    "test_lab_nfsrdma",
    "test_lab_iser",
    "test_lab_audit",
    "test_capture_lab",
    "test_capture_cleanup",
    "test_capture_nspcap",
    "test_capture_standin",
    "test_capture_verbs",
    "test_health_veth",
    "test_journal_fuzz",
    "test_house_litter",
    "test_bounded_resources",
    "test_sm_master",
    "test_outputs_safe",
    "test_devices_sysfs",
    "test_fast_memory",
}
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # a pytest-xdist worker: its controller set up the run below
# The parallel round's longest modules (a minute and more on CI's two cores), longest first, are handed out
# before the others, which follow by number of tests as pytest-xdist orders them: left to its order (by
# number of tests), test_fuzz_decode (3 tests, 3 minutes) or test_fresh_debian (1) came last, one core
# working alone at the end of the round.
LONG = (
    "test_fuzz_decode",
    "test_shapes",
    "test_packaging",
    "test_fresh_debian",
    "test_tcp_fields_tshark",
    "test_filter_ops_tshark",
    "test_icmp_tshark",
    "test_outputs_complete",
    "test_tshark_shapes",
)

REAL_HOME = os.path.expanduser("~")
if not WORKER:
    WRITES = litter.Writes([REAL_HOME, *litter.OUTSIDE])  # first, before this process starts a thread or a process

# Everything a test run writes outside tmp_path goes below one scratch folder, removed at the end: Python's
# bytecode (here and in every subprocess), hypothesis' example database, and the run's own home: HOME, the
# XDG folders and TMPDIR point there, so what a tool keeps in the home folder (pip's cache, Chromium's
# profile and crash reports, dconf, scapy's caches, `ibwire capture extcap --install`) lands there too.
# The user's pip settings (an index mirror, say) are read from where they are; they are only read.
if not WORKER:  # workers inherit the controller's scratch folder, HOME, TMPDIR and mount namespace
    SCRATCH = tempfile.mkdtemp(prefix="ibwire-tests-")
    START = time.time()  # a file outside the scratch folder changed since: by the run, or by another program
    for conf in (
        os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.join(REAL_HOME, ".config"), "pip", "pip.conf"),
        os.path.join(REAL_HOME, ".pip", "pip.conf"),
    ):
        if os.path.isfile(conf):
            os.environ.setdefault("PIP_CONFIG_FILE", conf)
    HOME = os.path.join(SCRATCH, "home")
    os.environ.update(
        HOME=HOME,
        XDG_CONFIG_HOME=os.path.join(HOME, ".config"),
        XDG_CACHE_HOME=os.path.join(HOME, ".cache"),
        XDG_DATA_HOME=os.path.join(HOME, ".local", "share"),
        XDG_STATE_HOME=os.path.join(HOME, ".local", "state"),
        TMPDIR=os.path.join(SCRATCH, "tmp"),
    )
    for d in (HOME, os.environ["TMPDIR"]):
        os.makedirs(d)
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = os.path.join(SCRATCH, "pycache")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = os.path.join(SCRATCH, "hypothesis")
BEFORE = pytest.StashKey[dict]()  # the repository as the run found it
OUTSIDE = pytest.StashKey[dict]()  # the names in the home folder and litter.OUTSIDE as the run found them


def outside(since=None):
    return litter.outside(
        [REAL_HOME, *litter.OUTSIDE], since, leave=[ROOT, SCRATCH, tempfile.gettempdir(), *litter.SYSTEM, litter.CACHE]
    )


def pytest_sessionstart(session):
    if WORKER:
        return
    session.config.stash[BEFORE] = litter.snapshot(ROOT)
    session.config.stash[OUTSIDE] = outside()


def pytest_sessionfinish(session, exitstatus):
    """Tests write only into temporary folders: anything the run created, changed or removed in the
    repository (ignored files included), and what a process of the run wrote in the home folder or in the
    places of litter.OUTSIDE, fails the run and is listed.  Changes there that the run did not make (see
    litter.Writes) are listed as a note."""
    if WORKER:
        return
    shutil.rmtree(SCRATCH, ignore_errors=True)
    before = session.config.stash.get(BEFORE, None)
    if before is None:
        return
    found, others = WRITES.blame(litter.changes(session.config.stash[OUTSIDE], outside(START)))
    found[:0] = [f"{c} (in the repository)" for c in litter.changes(before, litter.snapshot(ROOT))]
    if others:
        say(
            session,
            "changed outside temporary folders during the run, not by a process of the run (not counted):",
            others,
            red=False,
        )
    if found:
        say(
            session,
            "the test run wrote outside temporary folders (tests must write only into tmp_path"
            + (f"; {WRITES.off}, so every change counts" if WRITES.off else "")
            + "):",
            found,
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def say(session, title, lines, red):
    text = title + "\n  " + "\n  ".join(lines[:40]) + (f"\n  ... and {len(lines) - 40} more" if len(lines) > 40 else "")
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr:
        tr.write("\n")
        tr.write_line(text, red=red, bold=red)
    else:
        print(text, file=sys.stderr)


def pytest_report_header(config):
    return None if PUBLIC.is_dir() else f"no {PUBLIC}: the tests that read the public captures skip"


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: runs alone, in ./dev test's second round (conftest.SERIAL)")
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # modules go out in the order the workers collect them (LONG)


def pytest_collection_modifyitems(items):
    """Marks the SERIAL modules' tests.  In a plain clone (no ../shared beside it) a test that reads the public
    captures skips, saying where they come from; where they are (CI), nothing is skipped on their account."""
    for item in items:
        if item.path.stem in SERIAL:
            item.add_marker(pytest.mark.serial)
    if WORKER:  # LONG's modules first, then by number of tests (a module's tests keep their order)
        tests = Counter(item.path for item in items)
        items.sort(key=lambda i: (LONG.index(i.path.stem) if i.path.stem in LONG else len(LONG), -tests[i.path]))
    if PUBLIC.is_dir():
        return
    import public_need  # tests/public_need.py

    for item in items:
        if public_need.needs(item, PUBLIC):
            item.add_marker(pytest.mark.skip(reason=NO_PUBLIC), append=False)


@pytest.fixture(scope="session")
def public_dir():
    assert PUBLIC.is_dir(), NO_PUBLIC
    return PUBLIC


@pytest.fixture(scope="session")
def tshark():
    path = shutil.which("tshark")
    assert path, "tshark is required (apt-get install tshark; ./dev test installs it)"
    return path


@pytest.fixture(scope="session")
def tshark44(tmp_path_factory):
    """tshark 4.4 (Debian 13's), run in a debootstrapped trixie tree cached in litter.CACHE (built once, about
    a minute and 400 MB; tests/debroot.py): tshark44(capture, *args) -> stdout, run once per test run for a
    capture and arguments (tshark_runs.py).  The capture's folder is bound read-only-by-use at /caps inside
    the tree."""
    import debroot
    import tshark_runs

    assert os.geteuid() == 0, "chroot and mounts need root (./dev test runs as root)"
    assert shutil.which("debootstrap"), "debootstrap is required (./dev test installs it)"
    base = debroot.cached_tree("trixie-tshark", "trixie", "tshark")

    def run(capture, *args):
        capture = Path(capture).resolve()
        cmd = " ".join(["tshark", "-r", f"/caps/{capture.name}", *(f"'{a}'" for a in args)])

        def first():
            done = debroot.overlay_run(
                base, tmp_path_factory.mktemp("tshark44"), cmd, binds=[(str(capture.parent), "/caps")], timeout=300
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        return tshark_runs.once(f"chroot {base}", capture, args, first)

    return run


def tshark_fields(capture, *fields, display_filter="", first=False) -> list:
    """tshark's `-T fields` output for `capture`: per packet a list of len(fields) strings ("" where absent);
    `first`: only each field's first occurrence (-E occurrence=f)."""
    cmd = ["tshark", "-r", str(capture), *(["-Y", display_filter] if display_filter else []), "-T", "fields"]
    cmd += ["-E", "occurrence=f"] if first else []
    cmd += [a for f in fields for a in ("-e", f)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [(line.split("\t") + [""] * len(fields))[: len(fields)] for line in out.splitlines()]


def run_ibwire(*args, check=False, input=None, timeout=300, unwrapped=False):
    """Run the installed CLI as a user would; returns the CompletedProcess. `unwrapped`: run it without
    COLUMNS/LINES (as when piped), so table cells and paragraphs are not folded."""
    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent)) or "ibwire"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} if unwrapped else None
    return subprocess.run(
        [exe, *map(str, args)], capture_output=True, text=True, check=check, input=input, timeout=timeout, env=env
    )


@pytest.fixture(scope="session")
def rlab(tmp_path_factory):
    """The RDMA lab's four QEMU guests (tests/test_lab_rdma.py), booted once for every module that uses them."""
    from test_lab_rdma import boot_lab

    yield from boot_lab(tmp_path_factory)
