"""`ibwire` runs without the interpreter's start and ibwire's imports (about 0.35 s of CPU a run), for tests about
what a run prints rather than how the command starts.

- ibwire_runs(runs): several runs one after the other in one process, the CLI's own main() with each run's
  arguments and its standard output a file of its own.
- run_ibwire(*args): conftest.run_ibwire's stand-in, each run a process of its own forked from one that has
  imported ibwire (started once per test process, gone with it): the console script's run() with the run's
  arguments, environment, working folder and standard streams (standard input a pipe fed `input`, or
  /dev/null); its exit status is the process's."""

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import json, os, sys
from ibwire.cli import main

for out, args in json.loads(sys.argv[1]):
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(1)
    os.dup2(fd, 1)
    os.close(fd)
    sys.argv = ["ibwire", *args]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.close(saved)
    with open(out + ".status", "w") as f:
        f.write(str(code))
"""


def ibwire_runs(runs) -> list:
    """The standard output (text) of each run (a list of `ibwire` arguments), one after the other in one
    process; a run that does not exit 0 fails the test, naming its arguments."""
    with tempfile.TemporaryDirectory() as folder:
        jobs = [(str(Path(folder) / str(i)), [str(a) for a in args]) for i, args in enumerate(runs)]
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, json.dumps(jobs)], capture_output=True, text=True, cwd=ROOT, timeout=1200
        )
        assert done.returncode == 0, done.stderr[-2000:]
        out = []
        for path, args in jobs:
            status = Path(path + ".status").read_text()
            assert status == "0", (args, status, done.stderr[-2000:])
            out.append(Path(path).read_text())
        return out


ZYGOTE = r"""
import atexit, json, os, sys, traceback
import ibwire.cli, ibwire.cli.app, ibwire.decode.frame, ibwire.report.packets.printer, ibwire.report.packets.tree

def child(job):
    for fd, path, flags in ((0, job["stdin"], os.O_RDONLY), (1, job["out"], os.O_WRONLY), (2, job["err"], os.O_WRONLY)):
        f = os.open(path, flags)
        os.dup2(f, fd)
        os.close(f)
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.argv = ["ibwire", *job["args"]]
    code = 1
    try:
        ibwire.cli.run()
        code = 0
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        traceback.print_exc()
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)

pending = b""
while True:
    while b"\n" not in pending:
        more = os.read(0, 65536)
        if not more:
            sys.exit(0)
        pending += more
    line, pending = pending.split(b"\n", 1)
    pid = os.fork()
    if pid == 0:
        child(json.loads(line))
    os.write(1, b"%d\n" % pid)
    _, status = os.waitpid(pid, 0)
    os.write(1, b"%d\n" % os.waitstatus_to_exitcode(status))
"""
_zygote = None
_lock = threading.Lock()


def _started():
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, bufsize=0
        )
        atexit.register(_ended, _zygote)
    return _zygote


def _ended(zygote) -> None:
    """The test process ends: so does the forking process (at the end of its input), waited for."""
    zygote.stdin.close()
    zygote.wait(60)


def _feed(fifo: str, text: str) -> None:
    try:
        Path(fifo).write_text(text)
    except BrokenPipeError:  # the run did not read it all, as subprocess.run allows
        pass


def run_ibwire(*args, check=False, input=None, timeout=300, unwrapped=False):
    """conftest.run_ibwire's answer (a CompletedProcess with text output) from a forked run (module doc)."""
    env = {k: v for k, v in os.environ.items() if not unwrapped or k not in ("COLUMNS", "LINES")}
    argv = [str(a) for a in args]
    with tempfile.TemporaryDirectory() as folder, _lock:
        stdin, feed = os.devnull, None
        if input is not None:  # a pipe, as subprocess gives it
            stdin = os.path.join(folder, "in")
            os.mkfifo(stdin)
            feed = threading.Thread(target=_feed, args=(stdin, input))
            feed.start()
        job = dict(stdin=stdin, out=os.path.join(folder, "out"), err=os.path.join(folder, "err"), args=argv)
        for name in ("out", "err"):
            Path(job[name]).touch()
        zygote = _started()
        zygote.stdin.write(json.dumps(dict(job, cwd=os.getcwd(), env=env)).encode() + b"\n")
        pid = int(zygote.stdout.readline())
        if not select.select([zygote.stdout], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
            zygote.stdout.readline()
            if feed:  # a reader for a writer still waiting for one
                os.close(os.open(stdin, os.O_RDONLY | os.O_NONBLOCK))
                feed.join()
            raise subprocess.TimeoutExpired(["ibwire", *argv], timeout)
        code = int(zygote.stdout.readline())
        if feed:
            feed.join()
        out, err = Path(job["out"]).read_text(), Path(job["err"]).read_text()
    done = subprocess.CompletedProcess(["ibwire", *argv], code, out, err)
    if check:
        done.check_returncode()
    return done
