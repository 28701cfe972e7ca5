"""One capture from start to finish: resolve, choose, lock, journal, arm, write, stop, disarm, report."""
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Optional

from ..errors import UserError
from ..writers import LINKTYPE_ERF, LINKTYPE_INFINIBAND, erf_record
from . import counters, journal as jr
from .select import choose
from .sink import Sink, StatusLine
from .target import resolve


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


def say(msg: str):
    print(f"ibwire: {msg}", file=sys.stderr, flush=True)


def _build(name: str, t, o: Options):
    if name == "tc-mirror":
        if not t.representor:
            raise UserError(f"no representor found for VF {t.vf}; the eswitch must be in switchdev mode")
        from .backends.tcmirror import TcMirror
        mon, cap = (o.monitor.split(":", 1) + [None])[:2] if o.monitor else (None, None)
        return TcMirror(t.representor, t.identity.macs[0] if t.identity.macs else None, t.peers, mon, cap)
    if name == "netdev":
        iface = t.iface or t.uplink
        if not iface:
            raise UserError("the netdev backend needs an interface: give -i IFACE")
        from .backends.netdev import AfPacket

        class Netdev(AfPacket):
            notes = [f"AF_PACKET capture on {iface}"]

            def arm(self, journal):
                pass
        return Netdev(iface)
    if name == "ibdump":
        from .backends.ibdump import Ibdump
        return Ibdump(t.device, t.port)
    if name == "rdma-pcap":
        from .backends.rdmapcap import RdmaPcap
        bpf = None if (o.all or t.is_ib) else t.identity.bpf() or None
        return RdmaPcap(t.device, t.port, bpf)
    if name == "verbs":
        from .backends.verbs import Verbs
        return Verbs(t.device, t.port)
    raise UserError(f"unknown backend {name}")


class _Stop:
    def __init__(self):
        self.flag = False
        self.signal = None

    def __call__(self, signum, _frame):
        if self.flag and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.flag, self.signal = True, signum


def run(o: Options) -> dict:
    if o.backend == "ibsim":          # the simulated fabric needs no RDMA device or VF
        say("backend ibsim: forced with --backend; recording the MADs ibsim carries on loopback")
        from .ibsim import capture_ibsim
        server = os.environ.get("IBSIM_SERVER_PORT")     # the variable ibsim's clients read too
        return capture_ibsim(o.write, link=o.link, count=o.count, duration=o.duration,
                             port=int(server) if server else None)
    t = resolve(o.pf, o.vf, o.port, o.iface)
    for n in t.notes:
        say(n)
    name, reason, warnings = choose(t, o.backend)
    say(f"backend {name}: {reason}")
    for w in warnings:
        say(w)
    if t.vf is not None:
        if not o.all and t.identity.empty():
            raise UserError(f"cannot tell VF {t.vf}'s packets apart (no MAC, IP, LID or GID known); give --all to "
                            f"keep every packet of the port")
        say(f"VF {t.vf}: {t.identity.describe()}" + ("" if o.all else "; keeping only its packets"))
    match = None if (o.all or t.identity.empty() or t.vf is None) else t.identity.matcher()

    lock = jr.PortLock(t.lock_key)
    journal = jr.Journal(t.description)
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    backend = sink = None
    cnt = counters.source(t, name)
    before = after = {}
    status = StatusLine(o.status)
    seen = 0
    try:
        backend = _build(name, t, o)
        backend.arm(journal)
        for n in getattr(backend, "notes", []):
            say(n)
        in_lt = backend.linktype
        out_lt = in_lt
        if in_lt == LINKTYPE_ERF and o.link == "ib":
            out_lt = LINKTYPE_INFINIBAND
        elif in_lt == LINKTYPE_INFINIBAND and o.link == "erf":
            out_lt = LINKTYPE_ERF
        desc = f"device {t.device or '-'} port {t.port if t.device else '-'} VF {t.vf if t.vf is not None else '-'}" \
               f" backend {name}"
        sink = Sink(o.write, out_lt, desc, t.representor or t.iface or f"{t.device}:{t.port}", o.rotate_mb,
                    o.rotate_files)
        before = cnt[1]() if cnt else {}
        say(f"capturing {t.description} to {o.write} (Ctrl-C stops)")
        deadline = time.monotonic() + o.duration if o.duration else None

        def put(f):
            nonlocal seen
            ts, data, wl = f
            seen += 1
            if match and not match(in_lt, data):
                return
            if in_lt != out_lt:
                data = data[16:] if out_lt == LINKTYPE_INFINIBAND else erf_record(ts, data)
                wl = len(data)
            sink.write(data, ts, wl)

        def done():
            return stop.flag or (o.count and sink.packets >= o.count) or (deadline and time.monotonic() >= deadline)
        for f in backend.frames():
            if f is not None:
                put(f)
            status.update(sink.packets, sink.bytes, backend.backend_drops())
            if done():
                break
        if hasattr(backend, "stop"):
            backend.stop()
        if hasattr(backend, "finish"):     # what was queued or in flight when the stop came belongs to the capture
            for f in backend.finish():
                if not (o.count and sink.packets >= o.count):
                    put(f)
        after = cnt[1]() if cnt else {}
    finally:
        drops = 0
        if backend is not None:
            try:
                drops = backend.backend_drops()
            except Exception:  # the backend is already gone
                pass
            backend.close()
        problems = journal.disarm()
        lock.release()
        if sink:
            sink.close()
        status.finish()
        for s, h in old.items():
            signal.signal(s, h)
        for p in problems:
            say(f"could not undo: {p}; run `ibwire capture --cleanup`")
    what = cnt[0] if cnt else "counters"
    summary = counters.compare(sink.packets, sink.bytes, before, after, what, drops)
    if match:
        summary += f"; {seen - sink.packets:,} packets of other functions dropped by the VF filter"
    say(summary)
    if stop.signal == signal.SIGTERM:
        say("stopped by SIGTERM; everything armed was undone")
    return {"backend": name, "packets": sink.packets, "bytes": sink.bytes, "files": sink.files, "drops": drops,
            "before": before, "after": after, "summary": summary}
