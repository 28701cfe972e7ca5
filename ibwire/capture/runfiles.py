"""Files in ibwire's run directory (/run/ibwire: journals, locks), handled as root must handle them.

Every name is opened relative to a descriptor of the directory, with O_NOFOLLOW (a planted symbolic link is
never followed) and O_NONBLOCK (a planted FIFO never blocks), and only a regular file of this user is read
(open(2), openat(2)).  A file is replaced by writing a temporary file under an unpredictable name created with
O_CREAT|O_EXCL (a name planted in advance is never reused) and renaming it over the old name (rename(2):
atomic, it replaces the name itself, never what a planted link points to).  The temporary file is removed on
every error path; one left by a killed writer starts with its owner's name and `.tmp` ends it, for cleanup.
"""

import errno
import os
import secrets
import stat
from typing import Optional

READ_LIMIT = 1 << 20  # a journal holds a few dozen entries: a few kB
NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Unreadable(Exception):
    """A run-directory file that is not this user's regular file of sane size; the message says why."""


def open_dir(directory) -> int:
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def replace(directory, name: str, data: bytes, tmp_prefix: str) -> None:
    """Make `name` in `directory` hold `data`, whole or not at all (raises OSError)."""
    dfd = open_dir(directory)
    try:
        tmp, fd = _create_tmp(dfd, tmp_prefix)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:  # Ctrl-C too: no temporary file outlives a writer that can still act
            remove(dfd, tmp)
            raise
    finally:
        os.close(dfd)


def _create_tmp(dfd: int, prefix: str):
    while True:
        tmp = f"{prefix}.{secrets.token_hex(8)}.tmp"
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644, dir_fd=dfd)
        except FileExistsError:
            continue


def remove(dfd: int, name: str) -> Optional[str]:
    """Unlink a name (never what a link points to); None, or why it could not be removed."""
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    except OSError as e:
        return e.strerror
    return None


def _why(e: OSError) -> str:
    return "is a symbolic link (not followed)" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"


def open_regular(dfd: int, name: str, flags: int, mode: int = 0o644) -> int:
    """Descriptor of `name`, a regular file owned by this user (raises Unreadable saying what it is instead)."""
    try:
        fd = os.open(name, flags | NOFOLLOW, mode, dir_fd=dfd)
    except OSError as e:
        raise Unreadable(_why(e)) from None
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = (
            "is a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "is a directory"
            if stat.S_ISDIR(st.st_mode)
            else "is not a regular file"
        )
    elif st.st_uid != os.geteuid():
        why = f"is owned by uid {st.st_uid}, not by this user (not trusted)"
    if why:
        os.close(fd)
        raise Unreadable(why)
    return fd


def read(dfd: int, name: str, limit: int = READ_LIMIT) -> bytes:
    """The bytes of a small regular file of this user (raises Unreadable)."""
    fd = open_regular(dfd, name, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise Unreadable(f"is {size:,} bytes, more than a journal can be ({limit:,})")
        chunks, got = [], 0
        while got <= limit:
            b = os.read(fd, limit + 1 - got)
            if not b:
                break
            chunks.append(b)
            got += len(b)
        if got > limit:
            raise Unreadable(f"is more than a journal can be ({limit:,} bytes)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_lock(directory, name: str):
    """A lock file in `directory`, created if missing, as a text file object open for reading and writing."""
    dfd = open_dir(directory)
    try:
        fd = open_regular(dfd, name, os.O_RDWR | os.O_CREAT)
    finally:
        os.close(dfd)
    return os.fdopen(fd, "r+")
