"""Debootstrapped Debian trees the tests keep in litter.CACHE between runs, and running commands in them.

A tree is built once (under a lock, in a `.part` folder renamed into place when complete) and rebuilt when
the month changes, from the Debian mirror this machine's apt uses; `overlay_run` runs a command in it
inside a mount namespace of its own (unshare) on an overlay, so the cached tree stays as it was built and
nothing stays mounted once the run ends."""

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from litter import CACHE

DOWNLOADS = Path(CACHE) / "downloads"  # apt's .deb files and pip's cache, kept to spare the next run the network


def mirror(suite: str = "bookworm") -> str:
    """The site apt on this machine fetches Debian 12 from (the machine reaches Debian only through it; later
    suites come from the same site)."""
    out = subprocess.run(
        ["apt-get", "indextargets", "--format", "$(SITE) $(RELEASE)", "Created-By: Packages"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    sites = [line.split()[0] for line in out if line.endswith(" bookworm")]
    assert sites, "no bookworm source in this machine's apt sources (run apt-get update?)"
    return sites[0]


def cached_tree(name: str, suite: str, include: str = "") -> Path:
    """CACHE/<name>-<year>-<month>: `debootstrap --variant=minbase suite` with the packages of `include`
    (comma-separated), built if missing; older months' trees of that name are removed."""
    base = Path(CACHE) / f"{name}-{time.strftime('%Y-%m')}"
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not base.is_dir():
            part = base.with_name(f".{base.name}.part")
            shutil.rmtree(part, ignore_errors=True)
            cmd = ["debootstrap", "--variant=minbase"] + ([f"--include={include}"] if include else [])
            subprocess.run(cmd + [suite, str(part), mirror()], capture_output=True, check=True, timeout=1800)
            part.rename(base)
            for old in Path(CACHE).glob(f"{name}-*"):
                if old != base:
                    shutil.rmtree(old)
    return base


IN_NAMESPACE = """set -e
mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$T/upper,workdir=$T/work" "$T/root"
mount --rbind /dev "$T/root/dev"
mount --rbind /sys "$T/root/sys"
mount -t proc proc "$T/root/proc"
eval "$BINDS"
exec chroot "$T/root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin $NET \
    /bin/bash -ec "$CMD"
"""


def overlay_run(base: Path, t: Path, cmd: str, binds=(), env=None, timeout=1800, text=True):
    """Run `cmd` (bash) as root in an overlay of `base` whose upper layer is t/upper; `binds` are (host
    folder, folder in the tree) pairs mounted into it; `env` is a string of NAME=value words for the command."""
    for d in ("upper", "work", "root"):
        (t / d).mkdir(exist_ok=True)
    lines = []
    for host, inside in binds:
        lines.append(f'mkdir -p "$T/root{inside}" && mount --bind "{host}" "$T/root{inside}"')
    envs = dict(os.environ, BASE=str(base), T=str(t), CMD=cmd, NET=env or "", BINDS="\n".join(lines))
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", IN_NAMESPACE],
        check=False,
        env=envs,
        capture_output=True,
        text=text,
        timeout=timeout,
    )
