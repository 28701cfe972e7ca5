"""A per-user cache directory that a process, root's too, can trust with what it reads back.

`IBWIRE_CACHE` names the directory (empty: no cache); else `$XDG_CACHE_HOME/ibwire`, else `~/.cache/ibwire`
(the XDG Base Directory specification; made with mode 0700 where missing).  The path is resolved one
component at a time from `/`: every directory on the way must belong to this user or to root and be writable
by nobody else unless sticky (as ssh's StrictModes asks of `~/.ssh`), a symbolic link is followed only when it
belongs to this user or to root, and the directory itself must be this user's and writable by no one else.
Anything else — a `sudo -E` run whose HOME is another user's, a planted link — means no cache: callers then do
without, as they do on any error here.  Files are read only when they are regular, this user's and writable by
no one else, and are replaced whole: written to a part file (O_EXCL, O_NOFOLLOW, mode 0600) renamed over the
name within the directory's descriptor.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from typing import Optional

ENV = "IBWIRE_CACHE"
PART = ".part"
STALE_PART_S = 3600  # a part file older than this was left by a process killed while writing
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def location() -> Optional[tuple]:
    """(the cache directory's path, how many of its last components may be made), or None for no cache."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return (chosen, 1) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return (os.path.join(base, "ibwire"), 2) if os.path.isabs(base) else None


def _trusted(st: os.stat_result) -> bool:
    """A directory on the way: this user's or root's, and writable by others only when sticky."""
    if st.st_uid not in (os.geteuid(), 0):
        return False
    return not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(st.st_mode & stat.S_ISVTX)


def _own(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def open_dir() -> Optional[int]:
    """A descriptor (O_RDONLY) of the cache directory, its last components made where missing (location());
    None when there is none or it cannot be trusted."""
    where = location()
    if where is None or not where[0].startswith("/"):
        return None
    names = [c for c in where[0].split("/") if c not in ("", ".")]
    todo = [(c, i >= len(names) - where[1]) for i, c in enumerate(names)]  # (name, may be made)
    fd, links = os.open("/", _DIR), 0
    try:
        if not _trusted(os.fstat(fd)):
            return None
        while todo:
            c, makeable = todo.pop(0)
            try:
                nfd = os.open(c, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not makeable:  # (never the user's home, nor what a link leads to)
                    return None
                try:
                    os.mkdir(c, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(c, _DIR, dir_fd=fd)
            except OSError as e:
                st = os.stat(c, dir_fd=fd, follow_symlinks=False)
                if e.errno not in (errno.ELOOP, errno.ENOTDIR) or not stat.S_ISLNK(st.st_mode):
                    return None
                links += 1
                if st.st_uid not in (os.geteuid(), 0) or links > 40:
                    return None
                target = os.readlink(c, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR)
                todo[:0] = [(t, False) for t in target.split("/") if t not in ("", ".")]
                continue
            os.close(fd)
            fd = nfd
            if not _trusted(os.fstat(fd)):
                return None
        if not _own(os.fstat(fd)):
            return None
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def read(dfd: int, name: str, limit: int) -> Optional[bytes]:
    """The file `name` of the directory, when it is a regular file of this user's, writable by no one else,
    of `limit` bytes at most; else None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _own(st) or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write(dfd: int, name: str, data: bytes) -> bool:
    """Replace the file `name` of the directory with `data`, whole or not at all."""
    part = f".{name}.{secrets.token_hex(8)}{PART}"
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.rename(part, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return True
    except BaseException as e:
        try:
            os.unlink(part, dir_fd=dfd)
        except OSError:
            pass
        if not isinstance(e, OSError):
            raise
        return False


def prune(dfd: int, suffix: str, keep: int) -> None:
    """Remove all but the `keep` newest files ending in `suffix`, and part files left by killed writers."""
    try:
        names = os.listdir(dfd)
    except OSError:
        return
    now, ours = time.time(), []
    for name in names:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            continue
        if name.endswith(PART) and now - st.st_mtime > STALE_PART_S:
            ours.append((0, name))
        elif name.endswith(suffix) and not name.startswith("."):
            ours.append((st.st_mtime, name))
    stale = [n for t, n in ours if t == 0]
    kept = sorted((x for x in ours if x[0]), reverse=True)
    for name in stale + [n for _, n in kept[keep:]]:
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            pass
