"""Output files that are whole or absent, never an input, never written by two processes at once, and safe
for root to write in a directory other users can write to.

`output_file(path, inputs=...)` writes into a part file `.NAME.<stamp>.ibwire-part` beside the target, created
with O_CREAT|O_EXCL|O_NOFOLLOW under a name nobody can predict, flushed and fsync'd, then renamed over the
target (renameat(2) is atomic within a directory and never follows the target): an interrupt, a full disk or
any error leaves the old file or nothing.  Every name is taken relative to one descriptor of the directory
(openat, renameat), so a directory swapped in the meantime cannot redirect the write.  The part file is held
under flock(2); its stamp is CLOCK_MONOTONIC's when it was made, so of two writers of one target the younger
sees the older's locked part file and is refused instead of both claiming success.
A writer killed outright (SIGKILL, a power cut) leaves its part file; the kernel drops its lock with the
process, so the next ibwire writer in that directory removes every part file nobody holds (the lock is a
surer test of a dead owner than a pid, which another process may since have been given).
The target must be a regular file or absent (a symbolic link, FIFO, device, socket or directory is refused;
the null device is written through), and in a sticky world-writable directory such as /tmp one owned by
another user is refused, as are symbolic links of other users on the way to it: the kernel's
protected_regular and protected_symlinks rules (Documentation/admin-guide/sysctl/fs.rst), applied to root
too.  `open_direct` applies the same checks to a file written in place (a live capture).
`refuse_aliasing` refuses, before anything is opened, an output that is one of the inputs (through
symlinks, `..`, hard links) or another output.  `-` is standard output.  `left_behind()` says what an
interrupt left.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import signal
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO

from ibwire.errors import UserError

PART_SUFFIX = ".ibwire-part"
_PART = re.compile(r"\.(.+)\.([0-9a-f]{16}-[0-9a-f]{8})\.ibwire-part\Z", re.DOTALL)  # target name, stamp
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)
_NEW = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "device"),
    (stat.S_ISBLK, "device"),
)
_NULL = os.makedev(1, 3)  # /dev/null (Documentation/admin-guide/devices.txt)

_finished: list[str] = []  # outputs this process completed
_abandoned: list[tuple] = []  # (output, it existed before) given up on an error or interrupt


class OutputError(UserError):
    """An output could not be written whole (full disk, no permission, busy, unsafe); exit status 2."""


def _identity(path: str):
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:
        return None


def refuse_aliasing(outputs: Iterable[str | None], inputs: Iterable[str | None]) -> None:
    """UserError when an output resolves to one of the inputs, or two outputs to one file."""
    ins = [(str(p), os.path.realpath(str(p)), _identity(str(p))) for p in inputs if p is not None]
    seen: list = []
    for out in (str(p) for p in outputs if p is not None and str(p) != "-"):
        real, ident = os.path.realpath(out), _identity(out)
        for name, in_real, in_ident in ins:
            if real == in_real or (ident is not None and ident == in_ident):
                raise UserError(f"output {out} is the input {name}; refusing to overwrite it, choose another name")
        for name, o_real, o_ident in seen:
            if real == o_real or (ident is not None and ident == o_ident):
                raise UserError(f"outputs {name} and {out} are the same file; give each its own name")
        seen.append((out, real, ident))


def _foreign(dir_st: os.stat_result, st: os.stat_result) -> bool:
    """The kernel's may_create_in_sticky()/may_follow_link() test (fs/namei.c): `st` sits in a sticky
    world-writable directory and belongs neither to us nor to the directory's owner."""
    shared = dir_st.st_mode & (stat.S_ISVTX | stat.S_IWOTH) == stat.S_ISVTX | stat.S_IWOTH
    return shared and st.st_uid not in (os.geteuid(), dir_st.st_uid)


def _open_dir(directory: str) -> int:
    """A descriptor of `directory`, resolved one component at a time; a symbolic link on the way is
    followed only where protected_symlinks would let a user other than its owner follow it."""
    fd = os.open("/" if directory.startswith("/") else ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    todo, links = directory.split("/"), 0
    try:
        while todo:
            c = todo.pop(0)
            if c in ("", "."):
                continue
            try:
                nfd = os.open(c, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                st = os.stat(c, dir_fd=fd, follow_symlinks=False)
                if e.errno not in (errno.ELOOP, errno.ENOTDIR) or not stat.S_ISLNK(st.st_mode):
                    raise
                if _foreign(os.fstat(fd), st):
                    raise OutputError(
                        f"{directory} passes through {c}, a symbolic link of another user (uid "
                        f"{st.st_uid}) in a shared directory; ibwire does not follow it"
                    ) from None
                links += 1
                if links > 40:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), directory) from None
                target = os.readlink(c, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                todo[:0] = target.split("/")
                continue
            os.close(fd)
            fd = nfd
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def _target(dfd: int, name: str, path: str) -> os.stat_result | None:
    """The existing file at `name` (None if absent); OutputError for anything but a regular file of ours
    (or the null device)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    kind = next((k for test, k in _KINDS if test(st.st_mode)), None)
    if kind and not (stat.S_ISCHR(st.st_mode) and st.st_rdev == _NULL):
        raise OutputError(f"{path} is a {kind}; ibwire writes only regular files (- for standard output)")
    if _foreign(os.fstat(dfd), st):
        raise OutputError(
            f"{path} belongs to another user (uid {st.st_uid}) in a shared directory; ibwire does "
            f"not replace it (remove it or choose another name)"
        )
    return st


def _locked(fd: int, how: int, tries: int = 5) -> bool:
    """Lock `fd`; a cleaner in another ibwire holds a free part file's lock for an instant, so retry briefly."""
    for i in range(tries):
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if i + 1 < tries:
                time.sleep(0.01)
    return False


def _same(dfd: int, name: str, fd: int) -> bool:
    """`name` in the directory is still the file open as `fd`."""
    try:
        st, mine = os.stat(name, dir_fd=dfd, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _sweep(dfd: int, mine: str, name: str) -> bool:
    """Remove the part files no live writer holds (their writer was killed; in a sticky world-writable
    directory only our own); True when a live writer older than part file `mine` writes target `name`.
    Only regular files are opened, O_NONBLOCK."""
    dir_st, stamp = os.fstat(dfd), _PART.match(mine).group(2)
    for n in os.listdir(dfd):
        if n == mine or not (n.startswith(".") and n.endswith(PART_SUFFIX)):
            continue
        m = _PART.match(n)
        rival = bool(m and m.group(1) == name and m.group(2) < stamp)
        try:
            st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue
            fd = os.open(n, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            continue
        try:
            if not _locked(fd, fcntl.LOCK_SH, 5 if rival else 1):
                if rival:
                    return True
            elif _same(dfd, n, fd) and not _foreign(dir_st, st):  # as the sticky bit would have it
                os.unlink(n, dir_fd=dfd)
        except OSError:
            pass
        finally:
            os.close(fd)
    return False


def _open_part(dfd: int, name: str, path: str):
    """Create and lock a new part file for `name`; refuse when an older live writer writes the same target."""
    for _ in range(20):
        part = f".{name}.{time.monotonic_ns():016x}-{secrets.token_hex(4)}{PART_SUFFIX}"
        try:
            fd = os.open(part, os.O_RDWR | _NEW, 0o666, dir_fd=dfd)
        except FileExistsError:
            continue
        # a cleaner may have taken it for a stale part file in the instant before our lock: make another
        if _locked(fd, fcntl.LOCK_EX) and _same(dfd, part, fd):
            break
        if _same(dfd, part, fd):
            os.unlink(part, dir_fd=dfd)
        os.close(fd)
    else:
        raise OutputError(f"{path} is being written by other processes over and over; try again later")
    try:
        if _sweep(dfd, part, name):
            raise OutputError(f"{path} is being written by another process right now; try again when it is done")
    except BaseException:
        os.unlink(part, dir_fd=dfd)
        os.close(fd)
        raise
    return fd, part


def _cannot(path: str, existed: bool, e: OSError) -> OutputError:
    left = "the old file is unchanged" if existed else "no file was left"
    return OutputError(f"cannot write {path} ({e.strerror or e}); {left}")


def _opened(path: str) -> tuple:
    """(directory descriptor, file name, the file there now or None) of `path`, after the checks of
    `_target`; OutputError when it cannot be reached or is refused."""
    directory, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise OutputError(f"{path} is a directory; ibwire writes only regular files (- for standard output)")
    try:
        dfd = _open_dir(directory)
    except OSError as e:
        raise _cannot(path, False, e) from None
    try:
        return dfd, name, _target(dfd, name, path)
    except BaseException as e:
        os.close(dfd)
        if isinstance(e, OSError):
            raise _cannot(path, False, e) from None
        raise


@contextmanager
def output_file(path, mode: str = "wb", inputs: Iterable[str | None] = (), perms: int | None = None) -> Iterator[IO]:
    """A file object for `path` that becomes `path` only if the block finishes without an exception;
    `perms` sets its mode bits (else those of the file it replaces, or 0666 less the umask)."""
    path = str(path)
    if path == "-":
        with _straight(None, mode) as f:
            yield f
        return
    refuse_aliasing([path], inputs)
    dfd, name, old = _opened(path)
    try:
        if old is not None and not stat.S_ISREG(old.st_mode):  # the null device: nothing to replace
            with _straight(path, mode, _open_in_place(dfd, name, path, old)) as f:
                yield f
            return
        existed = old is not None
        try:
            with _signals_held():  # locked and recorded as one step: an interrupt from here on says "not written"
                fd, part = _open_part(dfd, name, path)
                _abandoned.append((path, existed))
        except OSError as e:
            raise _cannot(path, existed, e) from None
        bits = perms if perms is not None else old.st_mode & 0o777 if existed else None  # never a set-id bit
        yield from _fill(dfd, fd, part, name, path, mode, existed, bits)
    finally:
        os.close(dfd)


def _fill(
    dfd: int, fd: int, part: str, name: str, path: str, mode: str, existed: bool, bits: int | None
) -> Iterator[IO]:
    """Yield the part file as a file object, then sync it and rename it over `name` (renameat)."""
    try:
        if bits is not None:
            try:
                os.fchmod(fd, bits)
            except OSError:
                pass
        f = os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.unlink(part, dir_fd=dfd)
        os.close(fd)
        raise
    renamed = False
    try:
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
            with _signals_held():  # renamed and recorded as one step: an interrupt lands before or after
                os.rename(part, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                _abandoned.remove((path, existed))
                _finished.append(path)
                renamed = True
        except OSError as e:
            if not renamed and (e.errno in _DISK_ERRORS or e.filename in (path, part, name)):
                raise _cannot(path, existed, e) from None
            raise
    except BaseException:
        if not renamed:
            try:
                os.unlink(part, dir_fd=dfd)
            except OSError:
                pass
        try:
            f.close()
        except OSError:
            pass
        raise
    f.close()


def _open_in_place(dfd: int, name: str, path: str, old: os.stat_result | None) -> int:
    """`name` opened for writing (O_NOFOLLOW, O_NONBLOCK: never through a link, never hanging on a FIFO),
    created if `old` is None, else only if it is still `old`, and emptied."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags | (0 if old is not None else os.O_CREAT | os.O_EXCL), 0o666, dir_fd=dfd)
    except OSError as e:
        raise _cannot(path, old is not None, e) from None
    st = os.fstat(fd)
    if old is not None and (st.st_dev, st.st_ino) != (old.st_dev, old.st_ino):
        os.close(fd)
        raise OutputError(f"{path} was replaced while ibwire opened it; try again")
    if stat.S_ISREG(st.st_mode):
        os.ftruncate(fd, 0)
    return fd


def refuse_unsafe(path: str) -> None:
    """OutputError, before anything is started, when `path` is not a file ibwire would write (another
    program, dumpcap, writes it)."""
    os.close(_opened(path)[0])


def refuse_shared_dir(path: str) -> None:
    """OutputError when another user could write in the directory of `path`: files that another program
    names as it goes (dumpcap's `-b` ring, PREFIX_NNNNN_TIME.pcapng) are opened by name, so a name planted
    there before it is reached would be followed."""
    dfd = _open_dir(os.path.dirname(path) or ".")
    try:
        st = os.fstat(dfd)
    finally:
        os.close(dfd)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or st.st_uid != os.geteuid():
        raise OutputError(
            f"-C writes a ring of files that are named as they are written; put them in a "
            f"directory only you can write ({os.path.dirname(path) or '.'} is writable by others "
            f"or belongs to uid {st.st_uid})"
        )


def open_direct(path: str) -> IO:
    """`path` opened for writing in place (a live capture: flushed per packet, kept as it is when stopped),
    after the checks of `output_file`; the null device is written through."""
    dfd, name, old = _opened(path)
    try:
        return os.fdopen(_open_in_place(dfd, name, path, old), "wb")
    finally:
        os.close(dfd)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait (pending) until the block is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def _straight(path: str | None, mode: str, fd: int | None = None) -> Iterator[IO]:
    """Write into the null device (`fd`) or standard output (None) directly; its errors (a reader that went
    away, a full disk behind a redirection) are the output's."""
    try:
        if fd is None:
            f = sys.stdout.buffer if "b" in mode else sys.stdout
            yield f
            f.flush()
        else:
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
                yield f
    except BrokenPipeError:
        raise  # the reader went away (`| head`): the usual end of a pipeline, exit 2 unsaid
    except OSError as e:
        raise OutputError(f"cannot write {path or 'standard output'} ({e.strerror or e})") from None
    _finished.append(path or "standard output")


def left_behind() -> str:
    """One phrase on what this process's writers left, for the interrupt message."""
    parts = [
        f"{p} not written ({'the old file is unchanged' if existed else 'no partial file left'})"
        for p, existed in _abandoned
    ]
    parts += [f"{p} written completely" for p in _finished]
    return "; ".join(parts) if parts else "no file was written"
