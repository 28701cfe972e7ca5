"""One capture from start to finish: resolve, choose, lock, journal, arm, write, stop, disarm, report.

netdev and tc-mirror hand the packet path to dumpcap (ibwire.capture.dumpcap) with the VF selection as a BPF
filter; ibdump, rdma-pcap and verbs deliver frames that ibwire filters and writes itself (sink).  A capture
that ends on its own (full disk, vanished interface, dead engine) is disarmed all the same, its file is cut
to the last complete packet, and it ends with one sentence and exit status 1.
"""

import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional

from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_INFINIBAND
from ibwire.capture import counters
from ibwire.capture import journal as jr
from ibwire.capture.dumpcap import DEFAULT_BUFFER_MIB, IN_FLIGHT, Dumpcap, Plan
from ibwire.capture.ending import CaptureStopped, complete_prefix, truncate_to_complete
from ibwire.capture.select import choose
from ibwire.capture.sink import Sink, StatusLine
from ibwire.capture.target import resolve
from ibwire.errors import UserError
from ibwire.files.outfile import refuse_shared_dir, refuse_unsafe
from ibwire.files.writers import erf_record


@dataclass
class Options:
    write: str
    vf: Optional[int] = None
    pf: Optional[str] = None
    port: Optional[int] = None
    backend: str = "auto"
    iface: Optional[str] = None
    count: Optional[int] = None
    duration: Optional[float] = None
    rotate_mb: Optional[float] = None
    rotate_files: Optional[int] = None
    all: bool = False
    link: str = "erf"
    monitor: Optional[str] = None
    status: Optional[bool] = None
    buffer_mib: int = DEFAULT_BUFFER_MIB
    snaplen: Optional[int] = None
    bpf: Optional[str] = None


def say(msg: str):
    print(f"ibwire: {msg}", file=sys.stderr, flush=True)


def _build(name: str, t, o: Options):
    if name == "tc-mirror":
        if not t.representor:
            raise UserError(f"no representor found for VF {t.vf}; the eswitch must be in switchdev mode")
        from ibwire.capture.backends.tcmirror import TcMirror

        mon, cap = (o.monitor.split(":", 1) + [None])[:2] if o.monitor else (None, None)
        return TcMirror(t.representor, t.identity.macs[0] if t.identity.macs else None, t.peers, mon, cap)
    if name == "netdev":
        iface = t.iface or t.uplink
        if not iface:
            raise UserError("the netdev backend needs an interface: give -i IFACE")
        from ibwire.capture.backends.netdev import Netdev

        return Netdev(iface)
    if name == "ibdump":
        from ibwire.capture.backends.ibdump import Ibdump

        return Ibdump(t.device, t.port)
    if name == "rdma-pcap":
        from ibwire.capture.backends.rdmapcap import RdmaPcap

        bpf = None if (o.all or t.is_ib) else t.identity.bpf() or None
        return RdmaPcap(t.device, t.port, bpf)
    if name == "verbs":
        from ibwire.capture.backends.verbs import Verbs

        return Verbs(t.device, t.port)
    raise UserError(f"unknown backend {name}")


class _Stop:
    """The signal handler of a running capture: the first SIGINT, SIGTERM or SIGHUP asks the loop to stop (it
    disarms and closes the file); a second Ctrl-C interrupts whatever is still running."""

    def __init__(self):
        self.flag = False
        self.signal = None

    def __call__(self, signum, _frame):
        if self.flag and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.flag, self.signal = True, signum

    def is_set(self) -> bool:
        return self.flag


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _say_lines(lines):
    for line in lines:
        say(line)


def run(o: Options) -> dict:
    """Capture until the end the options set or a stop signal.  As tcpdump does, SIGINT and SIGTERM stop it
    whatever their inherited disposition (a capture started in the background of a script, where the shell
    ignores SIGINT, still stops on `kill -INT`); an ignored SIGHUP (nohup) stays ignored."""
    if o.write != "-":
        refuse_unsafe(o.write)  # a planted link or FIFO, before anything is armed (dumpcap opens it itself)
        if o.rotate_mb:
            refuse_shared_dir(o.write)
    stop = _Stop()
    old = {
        s: signal.signal(s, stop)
        for s in STOP_SIGNALS
        if not (s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN)
    }
    try:
        if o.backend == "ibsim":  # the simulated fabric needs no RDMA device or VF
            return _run_ibsim(o, stop)
        return _run_target(o, stop)
    finally:
        for s_, h in old.items():
            signal.signal(s_, h)


def _run_ibsim(o: Options, stop: _Stop) -> dict:
    say("backend ibsim: forced with --backend; recording the MADs ibsim carries on loopback")
    from ibwire.capture.ibsim import capture_ibsim

    server = os.environ.get("IBSIM_SERVER_PORT")  # the variable ibsim's clients read too
    where = "standard output" if o.write == "-" else o.write

    class Listening:  # capture_ibsim sets it once its socket listens
        @staticmethod
        def set():
            say(f"capturing the simulated fabric to {where} (Ctrl-C stops)")

    got = capture_ibsim(
        sys.stdout.buffer if o.write == "-" else o.write,
        link=o.link,
        count=o.count,
        duration=o.duration,
        port=int(server) if server else None,
        ready=Listening,
        stop=stop,
    )
    summary = f"{got['packets']:,} packets written; {got['dropped']:,} dropped by the kernel before ibwire read them"
    if got["bounced"]:
        summary += f"; {got['bounced']:,} MADs ibsim could not deliver (not written)"
    _report_end(say, summary, None, got["packets"], where, stop, armed=False)
    return got


def _run_target(o: Options, stop: _Stop) -> dict:
    t = resolve(o.pf, o.vf, o.port, o.iface)
    _say_lines(t.notes)
    name, reason, warnings = choose(t, o.backend)
    say(f"backend {name}: {reason}")
    _say_lines(warnings)
    if t.vf is not None:
        if not o.all and t.identity.empty():
            raise UserError(
                f"cannot tell VF {t.vf}'s packets apart (no MAC, IP, LID or GID known); give --all to "
                f"keep every packet of the port"
            )
        say(f"VF {t.vf}: {t.identity.describe()}" + ("" if o.all else "; keeping only its packets"))
    selecting = not (o.all or t.identity.empty() or t.vf is None)
    engine = name in ("netdev", "tc-mirror")
    if o.bpf and not engine:
        raise UserError(
            f"-f applies to the netdev and tc-mirror backends (dumpcap); backend {name} has no capture filter"
        )
    # a firmware sniffer is per port; tc-mirror captures of different VFs of one PF coexist
    lock = jr.PortLock(t.lock_key + (f":{t.representor}" if name == "tc-mirror" and t.device else ""))
    journal = None
    try:
        journal = jr.Journal(t.description)
        backend = _build(name, t, o)
        if engine:
            return _run_engine(o, t, name, backend, journal, stop, selecting)
        return _run_frames(o, t, name, backend, journal, stop, t.identity.matcher() if selecting else None)
    finally:
        if journal:
            _disarm(journal)  # no journal outlives a capture that failed before arming (done once)
        lock.release()


def _disarm(journal):
    for p in journal.disarm():
        say(f"could not undo: {p}; run `ibwire capture --cleanup`")


def _description(t, name: str) -> str:
    return (
        f"device {t.device or '-'} port {t.port if t.device else '-'} VF {t.vf if t.vf is not None else '-'}"
        f" backend {name}"
    )


def _run_engine(o: Options, t, name: str, backend, journal, stop: _Stop, selecting: bool) -> dict:
    """netdev/tc-mirror: arm, run dumpcap on the capture device, follow it, stop it, disarm, report."""
    cnt = counters.source(t, name)
    before = after = {}
    bpf = t.identity.bpf() if selecting else ""
    if o.bpf:
        bpf = f"({bpf}) and ({o.bpf})" if bpf else o.bpf
    plan = Plan(
        iface="",
        out=o.write,
        bpf=bpf or None,
        buffer_mib=o.buffer_mib,
        snaplen=o.snaplen,
        count=o.count,
        duration=o.duration,
        rotate_mb=o.rotate_mb,
        rotate_files=o.rotate_files,
        comment=_description(t, name) + f" ({t.description})",
    )
    eng = None
    status = StatusLine(o.status)
    failure = None
    try:
        backend.arm(journal)
        _say_lines(backend.notes)
        plan.iface = backend.capture_dev
        eng = Dumpcap(plan)
        eng.start(journal)
        before = cnt[1]() if cnt else {}
        say(
            f"capturing {t.description} to {'standard output' if o.write == '-' else o.write} with dumpcap"
            + (f", filter {bpf!r}" if bpf else "")
            + " (Ctrl-C stops)"
        )
        gone = None
        while eng.running() and not stop.flag and not gone and not eng.write_failed():
            status.update(eng.packets, None, 0)
            time.sleep(0.1)
            gone = backend.vanished()
        eng.stop(0 if gone or eng.write_failed() else IN_FLIGHT)
        eng.wait()
        failure = gone or eng.failure()
        after = cnt[1]() if cnt else {}
    finally:
        if eng is not None and eng.running():
            eng.stop(0)
            eng.wait()
        _disarm(journal)
        status.finish()
    packets, files = eng.written, eng.outputs()
    in_files = packets
    if failure:
        in_files = sum(truncate_to_complete(f)[0] for f in files) if files else packets
    elif o.rotate_mb:  # a ring keeps only its last files; each is at most -C MB
        in_files = sum(complete_prefix(f)[0] for f in files)
    drops = eng.drops()
    summary = counters.compare(packets, None, before, after, cnt[0] if cnt else "counters", drops)
    _report_end(
        say, summary, failure, in_files, ", ".join(files) or ("standard output" if o.write == "-" else o.write), stop
    )
    return {
        "backend": name,
        "packets": packets,
        "files": files,
        "drops": drops,
        "before": before,
        "after": after,
        "summary": summary,
    }


STOPPED_BY = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


def _report_end(say, summary: str, failure, packets: int, kept_in: str, stop: _Stop, armed: bool = True) -> None:
    """The capture's last words: the counter summary, then why it stopped.  A failure exits 1; a stop signal
    128 + its number (Ctrl-C 130, SIGTERM 143, SIGHUP 129) after one line on what was left; an end the options
    set (-c, --duration, -a) 0."""
    say(summary)
    if failure:
        raise CaptureStopped(f"{failure}; {packets:,} complete packets kept in {kept_in}, everything armed was undone")
    if stop.signal is not None:
        say(
            f"stopped by {STOPPED_BY.get(stop.signal, signal.Signals(stop.signal).name)}; {packets:,} packets kept "
            f"in {kept_in}, a valid capture; " + ("everything armed was undone" if armed else "nothing was armed")
        )
        raise SystemExit(128 + stop.signal)


class _Writer:
    """Converts and writes kept frames in its own thread, so the poll loop never waits on the disk."""

    def __init__(self, sink: Sink, in_lt: int, out_lt: int):
        self.sink, self.in_lt, self.out_lt = sink, in_lt, out_lt
        self.q: "queue.SimpleQueue" = queue.SimpleQueue()
        self.error: Optional[OSError] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while (f := self.q.get()) is not None:
            if self.error:  # the disk is full: the poll loop stops; drain what is queued
                continue
            if f[0] == "drops":
                self._drops(f[1])
                continue
            ts, data, wl = f
            if self.in_lt != self.out_lt:
                data = data[16:] if self.out_lt == LINKTYPE_INFINIBAND else erf_record(ts, data)
                wl = len(data)
            try:
                self.sink.write(data, ts, wl)
            except OSError as e:
                self.error = e

    def _drops(self, dropped: int) -> None:
        try:
            self.sink.statistics(dropped)
        except OSError as e:
            self.error = e

    def close(self):
        self.q.put(None)
        self.thread.join()


def _run_frames(o: Options, t, name: str, backend, journal, stop: _Stop, match) -> dict:
    """ibdump, rdma-pcap, verbs: frames come to ibwire; the poll loop filters them, a writer thread writes."""
    cnt = counters.source(t, name)
    before = after = {}
    status = StatusLine(o.status)
    sink = writer = None
    try:
        backend.arm(journal)
        _say_lines(getattr(backend, "notes", []))
        in_lt = backend.linktype
        out_lt = _out_linktype(in_lt, o.link)
        sink = Sink(
            o.write,
            out_lt,
            _description(t, name),
            t.representor or t.iface or f"{t.device}:{t.port}",
            o.rotate_mb,
            o.rotate_files,
        )
        writer = _Writer(sink, in_lt, out_lt)
        keep = _Keep(match, o.count, in_lt, writer)
        before = cnt[1]() if cnt else {}
        say(f"capturing {t.description} to {o.write} (Ctrl-C stops)")
        _poll(o, backend, stop, keep, status, sink)
        after = cnt[1]() if cnt else {}
    finally:
        drops, failure = _wind_down(o, backend, writer, journal, sink, status)
    if writer.error:
        failure = f"writing {o.write} failed ({writer.error.strerror}); the capture stopped"
    packets = in_files = sink.packets
    if failure:
        packets = in_files = sum(truncate_to_complete(f)[0] for f in sink.files if f != "-")
    elif o.rotate_mb:  # a ring keeps only its last files; each is at most -C MB
        in_files = sum(complete_prefix(f)[0] for f in sink.files)
    what = cnt[0] if cnt else "counters"
    summary = counters.compare(packets, sink.bytes, before, after, what, drops)
    if match:
        summary += f"; {keep.seen - keep.kept:,} packets of other functions dropped by the VF filter"
    _report_end(say, summary, failure, in_files, "standard output" if o.write == "-" else ", ".join(sink.files), stop)
    return {
        "backend": name,
        "packets": sink.packets,
        "bytes": sink.bytes,
        "files": sink.files,
        "drops": drops,
        "before": before,
        "after": after,
        "summary": summary,
    }


def _out_linktype(in_lt: int, link: str) -> int:
    """The link type written: --link ib unwraps ERF records to bare IB, --link erf wraps bare IB in ERF."""
    if in_lt == LINKTYPE_ERF and link == "ib":
        return LINKTYPE_INFINIBAND
    if in_lt == LINKTYPE_INFINIBAND and link == "erf":
        return LINKTYPE_ERF
    return in_lt


class _Keep:
    """The poll loop's filter: counts the frames seen and hands the VF's, up to -c, to the writer."""

    def __init__(self, match, count: Optional[int], in_lt: int, writer: _Writer):
        self.match, self.count, self.in_lt, self.writer = match, count, in_lt, writer
        self.seen = self.kept = 0

    def put(self, f):
        self.seen += 1
        if (self.match and not self.match(self.in_lt, f[1])) or self.full():
            return
        self.kept += 1
        self.writer.q.put(f)

    def full(self):
        return self.count and self.kept >= self.count


def _poll(o: Options, backend, stop: _Stop, keep: _Keep, status: StatusLine, sink: Sink) -> None:
    """Feeds the backend's frames to `keep` until a stop signal, a write error, -c or --duration; then stops the
    backend and takes what it still holds."""
    deadline = time.monotonic() + o.duration if o.duration else None
    dropped = 0
    for f in backend.frames():
        if f is not None:
            keep.put(f)
        now = backend.backend_drops()
        if now > dropped:  # recorded where it happened: flows ties each rise to the gaps before it
            keep.writer.q.put(("drops", now))
            dropped = now
        status.update(sink.packets, sink.bytes, now)
        if stop.flag or keep.writer.error or keep.full() or (deadline and time.monotonic() >= deadline):
            break
    if hasattr(backend, "stop"):
        backend.stop()
    if hasattr(backend, "finish") and not keep.writer.error:  # what was queued or in flight at the stop is ours
        for f in backend.finish():
            keep.put(f)


def _wind_down(o: Options, backend, writer, journal, sink, status: StatusLine):
    """The end of every frame capture, in this order: the backend's drops read and the backend closed, the
    queued frames written, everything armed undone, the file closed, the status line ended.  Returns the drops
    and the failure closing the file met, or None."""
    drops = 0
    failure = None
    if backend is not None:
        try:
            drops = backend.backend_drops()
        except Exception:  # the backend is already gone
            pass
        backend.close()
    if writer:
        writer.close()
    _disarm(journal)
    if sink:
        try:
            sink.close(drops)
        except OSError as e:
            failure = f"writing {o.write} failed ({e.strerror}); the capture stopped"
    status.finish()
    return drops, failure
