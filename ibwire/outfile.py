"""Output files that are whole or absent, never an input, never written by two processes at once.

`output_file(path, inputs=...)` writes into `.NAME.ibwire-part` beside the target, flushed and fsync'd,
then renames it over the target (rename(2) is atomic within a directory): an interrupt, a full disk or
any error leaves the old file or nothing.  The part file is held under flock(2): a second ibwire
writing the same target at the same time is refused instead of both claiming success.
A writer killed outright (SIGKILL, a power cut) leaves its part file; the kernel drops its lock with
the process, so the next ibwire writer in that directory removes every part file nobody holds (the lock
is a surer test of a dead owner than a pid, which another process may since have been given).
`refuse_aliasing` refuses, before anything is opened, an output that is one of the inputs (through
symlinks, `..`, hard links) or another output.  `-` is standard output.  `left_behind()` says what an
interrupt left.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import sys
import time
from contextlib import contextmanager
from typing import IO, Iterable, Iterator, List, Optional

from .errors import UserError

PART_SUFFIX = ".ibwire-part"
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)

_finished: List[str] = []        # outputs this process completed
_abandoned: List[tuple] = []     # (output, it existed before) given up on an error or interrupt


class OutputError(UserError):
    """An output could not be written whole (full disk, no permission, busy); exit status 2."""


def _identity(path: str):
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:
        return None


def refuse_aliasing(outputs: Iterable[Optional[str]], inputs: Iterable[Optional[str]]) -> None:
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


def part_name(path: str) -> str:
    """Where the output is written before it is renamed over `path`."""
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}{PART_SUFFIX}")


def remove_stale_parts(directory: str) -> None:
    """Remove the part files in `directory` no live writer holds (their writer was killed)."""
    try:
        names = [n for n in os.listdir(directory or ".") if n.startswith(".") and n.endswith(PART_SUFFIX)]
    except OSError:
        return
    for name in names:
        part = os.path.join(directory, name)
        try:
            fd = os.open(part, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _identity(part) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):   # still the file we locked
                os.unlink(part)
        except OSError:
            pass                        # held: its writer is alive
        finally:
            os.close(fd)


def _locked(fd: int) -> bool:
    """Lock `fd`; a cleaner in another ibwire holds a free part file's lock for an instant, so retry briefly."""
    for _ in range(5):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.01)
    return False


def _open_part(path: str) -> int:
    """Open and lock the part file of `path` (resolved); refuse when another live process holds it."""
    part = part_name(path)
    remove_stale_parts(os.path.dirname(part))
    for _ in range(20):
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        if not _locked(fd):
            os.close(fd)
            raise OutputError(f"{path} is being written by another process right now; try again when it is "
                              f"done") from None
        # the holder may have renamed the part file between our open and our lock: lock the current one
        if _identity(part) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)
    raise OutputError(f"{path} is being written by other processes over and over; try again later")


def _cannot(path: str, existed: bool, e: OSError) -> OutputError:
    left = "the old file is unchanged" if existed else "no file was left"
    return OutputError(f"cannot write {path} ({e.strerror or e}); {left}")


@contextmanager
def output_file(path, mode: str = "wb", inputs: Iterable[Optional[str]] = ()) -> Iterator[IO]:
    """A file object for `path` that becomes `path` only if the block finishes without an exception."""
    path = str(path)
    if path == "-":
        with _straight(None, mode) as f:
            yield f
        return
    refuse_aliasing([path], inputs)
    try:
        kind = os.stat(path).st_mode
    except OSError:
        kind = None
    if kind is not None and not stat.S_ISREG(kind):
        with _straight(path, mode) as f:              # /dev/null, /dev/stdout, a pipe: nothing to replace
            yield f
        return
    target = os.path.realpath(path)        # through a symlink: the file it names is replaced, the link stays
    existed = os.path.lexists(target)
    try:
        with _signals_held():     # locked and recorded as one step: an interrupt from here on says "not written"
            fd = _open_part(target)
            _abandoned.append((path, existed))
    except OSError as e:
        raise _cannot(path, existed, e) from None
    part = part_name(target)
    try:
        if existed:
            try:
                os.fchmod(fd, os.stat(path).st_mode & 0o7777)
            except OSError:
                pass
        f = os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    except BaseException:
        os.unlink(part)
        os.close(fd)
        raise
    renamed = False
    try:
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
            with _signals_held():          # renamed and recorded as one step: an interrupt lands before or after
                os.replace(part, target)
                _abandoned.remove((path, existed))
                _finished.append(path)
                renamed = True
        except OSError as e:
            if not renamed and (e.errno in _DISK_ERRORS or e.filename in (path, part, target)):
                raise _cannot(path, existed, e) from None
            raise
    except BaseException:
        if not renamed:
            try:
                os.unlink(part)
            except OSError:
                pass
        try:
            f.close()
        except OSError:
            pass
        raise
    f.close()


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait (pending) until the block is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def _straight(path: Optional[str], mode: str) -> Iterator[IO]:
    """Write into a device or pipe (standard output for None) directly; its errors (a full /dev/full, a
    reader that went away) are the output's."""
    try:
        if path is None:
            f = sys.stdout.buffer if "b" in mode else sys.stdout
            yield f
            f.flush()
        else:
            with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
                yield f
    except BrokenPipeError:
        raise                  # the reader went away (`| head`): the usual end of a pipeline, exit 2 unsaid
    except OSError as e:
        raise OutputError(f"cannot write {path or 'standard output'} ({e.strerror or e})") from None
    _finished.append(path or "standard output")


def left_behind() -> str:
    """One phrase on what this process's writers left, for the interrupt message."""
    parts = [f"{p} not written ({'the old file is unchanged' if existed else 'no partial file left'})"
             for p, existed in _abandoned]
    parts += [f"{p} written completely" for p in _finished]
    return "; ".join(parts) if parts else "no file was written"
