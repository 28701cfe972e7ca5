"""Command-line entry point.  Each command lives in its own module and registers on `app`.

Exit status: 0 success, 1 what the command defines (an audit finding), 2 unusable input or an output
that could not be written (unsaid when the reader of a pipe went away, as with `| head`: tshark's
manners), 3 internal error, 4 an audit passing on incomplete evidence, 130 Ctrl-C, 143 SIGTERM (with
one line on what was left)."""

import errno
import gc
import io
import os
import signal
import sys

# ibwire does no linear algebra: numpy's BLAS thread pool would only cost start-up time (set before numpy loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# pyarrow on the C library's allocator (set before pyarrow loads): export's peak memory is lower and the
# same from run to run (180k packets: 140 MB each run, against 150-166 MB with pyarrow's default mimalloc)
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from ibwire.errors import UserError
from ibwire.report.escape import printable

# The modules whose import registers their commands; a command named after its module needs only that one.
COMMANDS = (
    "convert",
    "decode",
    "capture",
    "devices",
    "lab",
    "audit",
    "synth",
    "stats",
    "flows",
    "export",
    "fabric",
    "health",
    "extcap",
)


def register(argv) -> None:
    """Register the command that argv names (a faster start: `decode` needs neither the capture nor the
    audit modules), or every command for help, completion and anything else."""
    import importlib

    named = argv[1] if len(argv) > 1 and argv[1] in COMMANDS else None
    for name in (named,) if named else COMMANDS:
        importlib.import_module(f"{__name__}.{name}")


def _typer(argv, command):
    """Typer's application, with the command that argv names registered on it."""
    register(argv)
    if command is None or isinstance(command, type(sys)):  # (importing cli/app.py set the module here)
        from ibwire.cli.app import app as command
    return command


def _quick(argv):
    """`ibwire health` on a plain command line runs without typer, whose import is 30 ms of its start (a
    tenth of a million packets' run); None for any other command line.  Its endings are typer's: Ctrl-C
    status 130, end of input an abort."""
    if argv[1:2] != ["health"]:
        return None
    from ibwire.cli.healthrun import quick, run

    args = quick(argv[2:])
    if args is None:
        return None

    def command(**_typer_options) -> int:  # (called as typer's application is)
        try:
            status = run(**args)
            gc.freeze()  # the process ends: its last collection need not walk all the run made (8 ms)
            return status
        except KeyboardInterrupt:
            return 130
        except EOFError:
            _say("")
            return 130

    return command


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every writer's cleanup runs as for Ctrl-C."""


def _on_signal(signum, _frame):
    """Ctrl-C and SIGTERM unwind the stack (writers clean up); a forked worker just leaves quietly,
    releasing its locks, and the parent reports."""
    global _LEAVING
    if os.getpid() != _MAIN_PID:
        if not _LEAVING:  # once is enough: no second unwind in the middle of the first
            _LEAVING = True
            raise SystemExit(128 + signum)
        return
    global _SIGNALLED
    _SIGNALLED = 128 + signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt()
    raise Terminated()


_MAIN_PID = os.getpid()
_LEAVING = False
_SIGNALLED = 0  # 130 or 143 once Ctrl-C or SIGTERM reached the main process


def _interrupted(status: int) -> None:
    from ibwire.files.outfile import left_behind

    how = "Ctrl-C" if status == 130 else "SIGTERM"
    _say(f"ibwire: interrupted by {how}; {left_behind()}")
    _exit(status)


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _exit(status: int) -> None:
    """Flush standard output first: a full disk or a closed reader must not pass for success."""
    try:
        sys.stdout.flush()
    except OSError as e:
        if status in (0, 1, 4):
            if not isinstance(e, BrokenPipeError):
                _say(f"ibwire: cannot write standard output ({e.strerror}); the output is incomplete")
            status = 2
        sys.stdout = open(os.devnull, "w")  # nothing left for the interpreter to flush, and fail on, at exit
    sys.exit(status)


def run() -> None:
    """The `ibwire` console script: main(), and once a command said it left nothing open (`closed_all`: decode),
    the end without the interpreter's teardown, which frees every module, array and heap block one by one
    (10-30 ms of a decode's run); standard output is flushed by then and the exit status is main()'s."""
    try:
        main()
    except SystemExit as e:
        if not _CLOSED_ALL or not (e.code is None or isinstance(e.code, int)):
            raise
        try:
            sys.stderr.flush()
        except OSError:
            pass
        os._exit(e.code or 0)


def closed_all() -> None:
    """Called by a command whose every file is closed and thread ended (no exit handler needed): the console
    script may then end the process at once."""
    global _CLOSED_ALL
    _CLOSED_ALL = True


_CLOSED_ALL = False


def main() -> None:
    """Run the CLI; user errors print one sentence, anything unexpected never shows a traceback."""
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    _steady_heap()
    stdout_was = _identity(os.fstat, 1)
    _whole_stdout()
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started ignoring it
        signal.signal(signal.SIGINT, _on_signal)
    command = globals().get("app")  # typer's application (a stand-in a test put here before)
    try:
        gc.disable()  # the imports build long-lived objects only: collecting among them is wasted start-up
        try:
            command = _quick(sys.argv) or _typer(sys.argv, command)
        finally:
            gc.enable()
        gc.freeze()
        rv = command(standalone_mode=False)
    except UserError as e:
        _say(f"ibwire: {printable(e)}")  # names and values from files, escaped
        _exit(e.exit_code)
    except KeyboardInterrupt:
        _interrupted(130)
    except Terminated:
        _interrupted(143)
    except BrokenPipeError:
        _closed_pipe()
    except SystemExit as e:
        if e.code == 1 and _pipe_closed_below(stdout_was):  # click's and rich's own ending for a closed pipe
            _closed_pipe()
        _exit(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            _say(f"ibwire: cannot write {e.filename or 'standard output'} ({e.strerror}); the output is incomplete")
            _exit(2)
        _internal(e)
    except Exception as e:  # usage errors of the CLI toolkit, and everything else
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            _exit(e.exit_code)
        if type(e).__name__ == "Abort":
            _interrupted(130)
        _internal(e)
    else:
        status = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        if status in (130, 143):  # typer turns Ctrl-C into a returned 130
            _interrupted(status)
        _exit(status)


class _WholeWrites(io.BufferedIOBase):
    """Standard output's binary stream, writing every byte or raising: a pipe write cut short (its reader
    left, a signal) returns a short count, from the raw stream under PYTHONUNBUFFERED and from
    BufferedWriter too, and callers of write() do not check counts."""

    def __init__(self, inner):
        super().__init__()
        self._inner = inner

    def write(self, b) -> int:
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):
            n = self._inner.write(view[done:])
            if not n:
                raise BrokenPipeError(errno.EPIPE, "standard output accepts no more")
            done += n
        return done

    def flush(self) -> None:
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def writable(self) -> bool:
        return True


def _steady_heap() -> None:
    """Blocks of 1 MiB and more (record batches, event logs, spill pieces) come from mmap and go back to the
    system when freed (mallopt(3) M_MMAP_THRESHOLD).  glibc's default raises that threshold as large blocks
    are freed and then keeps them in per-thread heaps, so the peak grew with the capture: export of 90k and
    180k packets peaked at 137 and 148 MB, now 126 and 129 MB.  Not glibc: nothing to do."""
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (malloc.h)
    except (AttributeError, OSError):
        pass


def _whole_stdout() -> None:
    """Put standard output on _WholeWrites (when it is a file descriptor, not a test's capture)."""
    old = sys.stdout
    buf = getattr(old, "buffer", None)
    if isinstance(buf, (io.FileIO, io.BufferedWriter)):
        sys.stdout = io.TextIOWrapper(
            _WholeWrites(buf),
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=old.line_buffering,
            write_through=old.write_through,
        )


def _identity(stat, what):
    """(device, inode) of a path or file descriptor, None when it cannot be looked at."""
    try:
        st = stat(what)
        return st.st_dev, st.st_ino
    except OSError:
        return None


def _pipe_closed_below(stdout_was) -> bool:
    """Did a library end on a closed standard output?  click then wraps sys.stdout; rich points file
    descriptor 1 at /dev/null (both exit 1)."""
    now = _identity(os.fstat, 1)
    return type(sys.stdout).__name__ == "PacifyFlushWrapper" or (
        stdout_was is not None and now not in (stdout_was, None) and now == _identity(os.stat, os.devnull)
    )


def _closed_pipe() -> None:
    """The reader of standard output went away: the output is incomplete (2), and nothing more is said
    (standard output now points at /dev/null, so nothing fails on the way out)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    except OSError:
        pass
    sys.stdout = open(os.devnull, "w")
    sys.exit(2)


def _internal(e: BaseException) -> None:
    if _SIGNALLED:  # the signal's exception was turned into another on its way up (inside CPython or a library)
        _interrupted(_SIGNALLED)
    _say(f"ibwire: internal error ({type(e).__name__}: {e}); please report it with the input that caused it")
    _exit(3)
