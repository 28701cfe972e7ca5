"""Nothing a user runs leaves litter where they stand: a diag tool under ibsim's libumad2sim writes a
simulated sysfs (./sys-PID) into its cwd, so ibwire runs those tools in a scratch folder; a simulated fabric
removes the folder it made.  And the repository check that tests/conftest.py runs after every test session
really notices what a run writes (also where .gitignore hides it), as does its check of the home folder
and the other places outside temporary folders."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibwire.audit import state
from ibwire.capture.ibsim_lab import SimFabric
from ibwire.errors import UserError
from litter import changes, outside, snapshot

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
        text = state._run(["smpquery", "-D", "nodeinfo", "0"])          # what `audit --state live` runs
        assert "NodeType:" in text and "Switch" in text
        with pytest.raises(UserError, match="did not answer"):        # killed after its timeout
            state._run(["opensm", "-s", "0", "-f", str(tmp_path / "osm.log")], timeout=1.5)
        monkeypatch.delenv("LD_PRELOAD")
        osm = fab.start_opensm()
        assert "Hca1" in fab.run(["smpquery", "-D", "nodedesc", "0,1"])     # the node behind port 1
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
    (repo / "sys-123" / "class" / "infiniband").mkdir(parents=True)       # what umad2sim leaves
    (repo / "sys-123" / "class" / "infiniband" / "node_guid").write_text("0x1\n")
    (repo / "pkg" / "a.py").write_text("x = 22\n")
    (repo / "gone.txt").unlink()
    (repo / ".venv" / "pip-installed").write_text("")                    # the venv is not the repository
    assert "sys-123" not in " ".join(git_status(repo))                   # git status alone misses it
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
    code = ("import os, tempfile; from pip._internal.locations import USER_CACHE_DIR; "
            "print(os.path.expanduser('~')); print(USER_CACHE_DIR); print(tempfile.gettempdir())")
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
    time.sleep(0.05)              # file times come from the kernel's coarse clock, a few ms behind
    assert changes(before, outside(places, start, leave)) == []
    (place / ".config" / "wireshark" / "extcap").mkdir(parents=True)       # what `extcap --install` makes
    (place / ".config" / "wireshark" / "extcap" / "ibwire-extcap").write_text("#!/bin/sh\n")
    (place / ".config" / "tool" / "settings").write_text("changed\n")
    (place / ".bashrc").unlink()
    (place / ".cache" / "made-and-removed").write_text("")
    (place / ".cache" / "made-and-removed").unlink()
    (place / "scratch" / "x").write_text("")                               # below a folder left out
    assert changes(before, outside(places, start, leave)) == [
        f"created {place}/.config/wireshark", f"deleted {place}/.bashrc", f"modified {place}/.config/tool/settings"]
