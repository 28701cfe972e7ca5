"""Nothing a user runs leaves litter where they stand: a diag tool under ibsim's libumad2sim writes a
simulated sysfs (./sys-PID) into its cwd, so ibwire runs those tools in a scratch folder; a simulated fabric
removes the folder it made.  And the repository check that tests/conftest.py runs after every test session
really notices what a run writes (also where .gitignore hides it), as does its check of the home folder
and the other places outside temporary folders; there it blames the run only for what the run's own
processes wrote, not for what another program on the machine changed meanwhile."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from litter import changes, outside, snapshot

from ibwire.audit import state
from ibwire.errors import UserError
from ibwire.lab.simfabric import SimFabric

TOPO = Path(__file__).resolve().parent / "fabric" / "small.topo"


def test_diag_tools_under_simulated_fabric_leave_nothing_in_the_cwd(tmp_path, monkeypatch):
    """umad2sim removes ./sys-PID when its process exits normally; a process that is killed (a diag tool
    that did not answer in time, opensm at the end) leaves it.  Both happen here."""
    here = tmp_path / "where-the-user-stands"
    here.mkdir()
    monkeypatch.chdir(here)
    with SimFabric(str(TOPO)) as fab:
        for k, v in fab.env().items():
            monkeypatch.setenv(k, v)
        text = state._run(["smpquery", "-D", "nodeinfo", "0"])  # what `audit --state live` runs
        assert "NodeType:" in text and "Switch" in text
        with pytest.raises(UserError, match="did not answer"):  # killed after its timeout
            state._run(["opensm", "-s", "0", "-f", str(tmp_path / "osm.log")], timeout=1.5)
        monkeypatch.delenv("LD_PRELOAD")
        osm = fab.start_opensm()
        assert "Hca1" in fab.run(["smpquery", "-D", "nodedesc", "0,1"])  # the node behind port 1
        osm.kill()
        osm.wait()
        made = fab.workdir
        assert [p.name for p in Path(made).iterdir() if p.name.startswith("sys-")] == [f"sys-{osm.pid}"]
    assert list(here.iterdir()) == []
    assert not os.path.exists(made)


def test_litter_check_sees_created_changed_deleted_and_ignored_files(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "keep.txt").write_text("same\n")
    (repo / "gone.txt").write_text("bye\n")
    (repo / ".gitignore").write_text("sys-*/\n")
    (repo / ".venv").mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    before = snapshot(repo)
    (repo / "sys-123" / "class" / "infiniband").mkdir(parents=True)  # what umad2sim leaves
    (repo / "sys-123" / "class" / "infiniband" / "node_guid").write_text("0x1\n")
    (repo / "pkg" / "a.py").write_text("x = 22\n")
    (repo / "gone.txt").unlink()
    (repo / ".venv" / "pip-installed").write_text("")  # the venv is not the repository
    assert "sys-123" not in " ".join(git_status(repo))  # git status alone misses it
    assert changes(before, snapshot(repo)) == ["created sys-123", "deleted gone.txt", "modified pkg/a.py"]


def git_status(repo: Path) -> list:
    out = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    return sorted(out.stdout.splitlines())


def test_the_run_has_its_own_home_so_tools_keep_their_caches_in_the_scratch_folder(tmp_path):
    """conftest points HOME, the XDG folders and TMPDIR of the run into its scratch folder: pip's cache,
    a tool's settings and temporary files of every process the tests start land there, not in ~."""
    import pwd

    scratch = os.path.dirname(os.environ["HOME"])
    assert os.path.basename(scratch).startswith("ibwire-tests-")
    assert pwd.getpwuid(os.getuid()).pw_dir != os.environ["HOME"]
    code = (
        "import os, tempfile; from pip._internal.locations import USER_CACHE_DIR; "
        "print(os.path.expanduser('~')); print(USER_CACHE_DIR); print(tempfile.gettempdir())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert all(line.startswith(scratch + "/") for line in out[:3]), out


def test_outside_check_sees_what_a_run_created_changed_and_deleted(tmp_path):
    place = tmp_path / "home"
    (place / ".config" / "tool").mkdir(parents=True)
    (place / ".config" / "tool" / "settings").write_text("old\n")
    (place / ".bashrc").write_text("")
    (place / ".cache").mkdir()
    (place / "scratch").mkdir()
    places, leave = [place, tmp_path / "missing"], [place / "scratch"]
    before = outside(places, leave=leave)
    start = time.time()
    time.sleep(0.05)  # file times come from the kernel's coarse clock, a few ms behind
    assert changes(before, outside(places, start, leave)) == []
    (place / ".config" / "wireshark" / "extcap").mkdir(parents=True)  # what `extcap --install` makes
    (place / ".config" / "wireshark" / "extcap" / "ibwire-extcap").write_text("#!/bin/sh\n")
    (place / ".config" / "tool" / "settings").write_text("changed\n")
    (place / ".bashrc").unlink()
    (place / ".cache" / "made-and-removed").write_text("")
    (place / ".cache" / "made-and-removed").unlink()
    (place / "scratch" / "x").write_text("")  # below a folder left out
    assert changes(before, outside(places, start, leave)) == [
        f"created {place}/.config/wireshark",
        f"deleted {place}/.bashrc",
        f"modified {place}/.config/tool/settings",
    ]


INNER = '''import os, time
from pathlib import Path


def test_meanwhile():
    """Lets the other program write, and waits until it has, so its writes fall inside this run."""
    Path(os.environ["LITTER_STARTED"]).write_text("")
    done = Path(os.environ["LITTER_HOME"], ".other-program-done")
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists()
    if os.environ.get("LITTER_TEST_WRITES"):
        Path(os.environ["LITTER_HOME"], ".config", "tool", "written-by-a-test").write_text("litter\\n")
'''


# waits (a minute at most) until INNER has begun, then changes a file, makes a folder and a file in it
OTHER_PROGRAM = (
    'for i in $(seq 1200); do [ -e "$1" ] && break; sleep 0.05; done; echo new > "$0/.config/tool/settings";'
    ' mkdir "$0/.cache"; echo x > "$0/.cache/made-by-another-program"; touch "$0/.other-program-done"'
)


def run_beside_another_program(tmp_path, test_writes):
    """A pytest run of INNER with this conftest, whose home folder (a place the check watches) a program
    outside the run's process tree, started before it in a session of its own, changes while it runs
    (after INNER's test has begun)."""
    home = tmp_path / "home"
    (home / ".config" / "tool").mkdir(parents=True)
    (home / ".config" / "tool" / "settings").write_text("old\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "run" / "test_inner.py").write_text(INNER)
    other = subprocess.Popen(["setsid", "sh", "-c", OTHER_PROGRAM, str(home), str(tmp_path / "started")])
    env = dict(
        os.environ,
        HOME=str(home),
        TMPDIR=str(tmp_path / "tmp"),
        LITTER_HOME=str(home),
        LITTER_STARTED=str(tmp_path / "started"),
        PYTHONPATH=str(Path(__file__).resolve().parent),
        LITTER_TEST_WRITES="1" if test_writes else "",
    )
    for k in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "PIP_CONFIG_FILE"):
        env.pop(k, None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "test_inner.py"],
        check=False,
        cwd=tmp_path / "run",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.wait(timeout=60) == 0
    return run, home


def test_what_another_program_writes_during_the_run_does_not_fail_it(tmp_path):
    run, home = run_beside_another_program(tmp_path, test_writes=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    note = run.stdout.split("not by a process of the run (not counted):")[1]
    assert f"modified {home}/.config/tool/settings" in note and f"created {home}/.cache" in note
    assert "the test run wrote outside temporary folders" not in run.stdout


def test_what_a_test_writes_there_during_the_same_run_fails_it_and_is_named(tmp_path):
    run, home = run_beside_another_program(tmp_path, test_writes=True)
    assert run.returncode == 1, run.stdout + run.stderr
    blamed = run.stdout.split("the test run wrote outside temporary folders")[1]
    assert f"created {home}/.config/tool/written-by-a-test" in blamed
    assert "settings" not in blamed and ".cache" not in blamed
