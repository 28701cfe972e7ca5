"""The README's first command on a Debian 12 that debootstrap has just made (minbase, nothing added), as
root in a chroot: `./dev demo` installs what it needs, audits the sample and writes the report, and its
next run makes a half-made .venv anew.  Every package `./dev test` would install exists in Debian 12.

The minbase tree is built once a month into litter.CACHE (outside the repository, kept between runs; about
a minute and 200 MB) from the Debian mirror this machine's apt uses.  Each chroot run mounts an overlay on
it inside a mount namespace of its own (unshare), so the cached tree stays as debootstrap left it and
nothing stays mounted once the run ends.  The repository goes in as `git archive` of what git tracks (a
commit of the work tree's tracked files, so uncommitted edits are tested too), and nothing else.  What apt
and pip download is kept in litter.CACHE too (the packages are still installed from nothing each run).  The
chroot gets this machine's network settings: resolv.conf, and the certificate authorities it trusts (the
ones it adds in /usr/local/share/ca-certificates, and its bundle, which pip in the chroot is told to use:
Debian's first pip in a venv trusts only its own list, and this machine's network may present a
certificate of its own)."""

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import debroot
from debroot import DOWNLOADS

ROOT = Path(__file__).resolve().parents[1]
SUITE = "bookworm"
BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def minbase() -> Path:
    """The cached chroot (tests/debroot.py builds it once a month)."""
    return debroot.cached_tree(f"{SUITE}-minbase", SUITE)


def chroot(t: Path, cmd: str) -> subprocess.CompletedProcess:
    binds = []
    for host, inside in ((DOWNLOADS / "apt", "/var/cache/apt/archives"), (DOWNLOADS / "pip", "/root/.cache/pip")):
        host.mkdir(parents=True, exist_ok=True)
        binds.append((str(host), inside))
    return debroot.overlay_run(
        minbase(),
        t,
        f"cd /root/ibwire && {cmd}",
        binds=binds,
        env=f"PIP_CERT={BUNDLE}" if os.path.isfile(BUNDLE) else "",
    )


def fresh_machine(t: Path) -> Path:
    """An overlay's upper layer on the cached minbase, with the repository in /root/ibwire."""
    for d in ("upper", "work", "root"):
        (t / d).mkdir()
    upper = t / "upper"
    repo = upper / "root" / "ibwire"
    repo.mkdir(parents=True)
    commit = (
        subprocess.run(["git", "stash", "create"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        or "HEAD"
    )
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
    (upper / "etc").mkdir()
    shutil.copy("/etc/resolv.conf", upper / "etc" / "resolv.conf")
    cas = Path("/usr/local/share/ca-certificates")
    if cas.is_dir():
        shutil.copytree(cas, upper / cas.relative_to("/"))
    if os.path.isfile(BUNDLE):
        (upper / BUNDLE[1:]).parent.mkdir(parents=True)
        shutil.copy(BUNDLE, upper / BUNDLE[1:])
    return repo


def test_dev_demo_on_fresh_debootstrapped_debian_then_recovers_a_half_made_venv(tmp_path):
    assert os.geteuid() == 0, "chroot and mounts need root (./dev test runs as root)"
    assert shutil.which("debootstrap"), "debootstrap is required (./dev test installs it)"
    start = time.monotonic()
    minbase()
    built = time.monotonic()
    repo = fresh_machine(tmp_path)
    assert not (tmp_path / "upper" / "usr" / "bin" / "python3").exists()

    first = chroot(tmp_path, "./dev demo")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "report: /root/ibwire/audit-report.html (audit exit status 1:" in first.stdout
    assert "FAIL" in first.stdout  # the sample's injected breaches
    report = (repo / "audit-report.html").read_text()
    assert report.startswith("<!DOCTYPE html>") and "</html>" in report
    site = next((repo / ".venv" / "lib").glob("python3*/site-packages"))
    installed = {p.name.lower() for p in site.iterdir()}
    assert {"scapy", "pyarrow", "numpy"} <= installed
    assert not installed & {"pytest", "pyspark", "duckdb", "hypothesis", "pandas"}  # the demo needs no test extras
    venv_mb = sum(f.stat().st_size for f in (repo / ".venv").rglob("*") if f.is_file() and not f.is_symlink()) >> 20
    demo = time.monotonic()

    shutil.rmtree(site / "pip")  # what an interrupted first run can leave
    (repo / "audit-report.html").unlink()
    again = chroot(tmp_path, "./dev demo")
    assert again.returncode == 0, again.stdout + again.stderr
    assert ".venv has no working pip: making it anew" in again.stdout
    assert (repo / "audit-report.html").read_text().startswith("<!DOCTYPE html>")
    assert (next((repo / ".venv" / "lib").glob("python3*/site-packages")) / "pip").is_dir()

    # ./dev test's first step on the same machine: every package it names exists and installs together.
    plan = chroot(tmp_path, "apt-get install --simulate $(./dev packages)")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    planned = re.findall(r"^Inst (\S+)", plan.stdout, re.MULTILINE)
    print(
        f"minbase {built - start:.0f} s (0 when cached), first demo {demo - built:.0f} s (.venv {venv_mb} MB), "
        f"second {time.monotonic() - demo:.0f} s; ./dev test would install {len(planned)} packages on top of the demo's"
    )
