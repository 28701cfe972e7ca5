"""`ibwire synth`: protocol-faithful IB and RoCE traffic from a scenario file (see captures/README.md)."""

import heapq
from typing import Optional

from ibwire.errors import UserError
from ibwire.files.outfile import output_file, refuse_aliasing
from ibwire.files.writers import PcapWriter
from ibwire.synth.engine import Context, qp_flow
from ibwire.synth.iser import iser_frames
from ibwire.synth.links import LINKS, Link
from ibwire.synth.lossless import control_frames
from ibwire.synth.management import ipoib_joins, ipoib_pings, sm_sweep, smp_faults
from ibwire.synth.nfs import nfs_frames
from ibwire.synth.nvme import nvme_frames
from ibwire.synth.scenario import LAST_SECOND, Scenario, load
from ibwire.synth.smb import smb_frames

__all__ = ["generate", "frames", "load", "LINKS", "Scenario"]


class _Stamp:
    """A capture timestamp as whole seconds plus an offset, so nanoseconds survive a 1.7e9 epoch.

    The writers take `int(ts)` and `ts - int(ts)`; a plain float would round to ~240 ns at this epoch.
    """

    __slots__ = ("sec", "off")

    def __init__(self, sec: int, off: float):
        whole = int(off // 1)
        self.sec, self.off = sec + whole, off - whole

    def __int__(self):
        return self.sec

    def __sub__(self, other):
        return self.off + (self.sec - other)

    def __float__(self):
        return self.sec + self.off


def frames(scen: Scenario, link: Optional[str] = None, seed: Optional[int] = None, truth: Optional[dict] = None):
    """Yield (timestamp, frame bytes) for the whole scenario, in time order.  `truth`: a dict that receives,
    by kind, the numbers (from 1) of the captured request frames the requesters resent ("resent"), resent
    after the capture missed or saw damaged their first sending ("lost"), resent when the local ACK timer
    ran out ("timeout"), resent after the responder had accepted them ("duplicate"), and that follow PSNs the
    mirror missed ("not_captured": frame -> how many)."""
    lk = Link(link or scen.link)
    ctx = Context(scen, lk, scen.seed if seed is None else seed)
    mgmt = (
        sm_sweep(ctx, 0.0)
        + smp_faults(ctx, 0.0)
        + ipoib_pings(ctx, 0.0)
        + ipoib_joins(ctx, 0.0)
        + control_frames(ctx, 0.0)
        + nfs_frames(ctx, 0.0)
        + smb_frames(ctx, 0.0)
        + iser_frames(ctx, 0.0)
        + nvme_frames(ctx, 0.0)
    )
    mgmt_events = sorted(((t, next(ctx.seq), f) for t, f in mgmt), key=lambda e: (e[0], e[1]))
    flows = [qp_flow(ctx, qp) for qp in scen.qps.values()]
    sec = int(scen.start)
    base = scen.start - sec
    if truth is not None:
        truth.update({k: {} if isinstance(v, dict) else [] for k, v in ctx.truth.items()})
    for n, (t, s, f) in enumerate(heapq.merge(iter(mgmt_events), *flows, key=lambda e: (e[0], e[1])), 1):
        if truth is not None:
            for kind, got in ctx.truth.items():
                if s in got and isinstance(got, set):
                    truth[kind].append(n)
                elif s in got:
                    truth[kind][n] = got[s]
        yield _Stamp(sec, base + t), f


def generate(scenario_path, out_path, link: Optional[str] = None, seed: Optional[int] = None) -> int:
    """Write the scenario's capture to `out_path`; returns the number of frames written."""
    if link is not None and link not in LINKS:
        raise UserError(f"--link {link!r} is not one of {', '.join(LINKS)}")
    refuse_aliasing([out_path], [scenario_path])
    scen = load(scenario_path, link)
    lk = Link(scen.link)
    with output_file(out_path, inputs=[scenario_path]) as out:
        w = PcapWriter(out, lk.linktype, nanos=True)
        for ts, f in frames(scen, scen.link, seed):
            if int(ts) > LAST_SECOND:
                raise UserError(
                    f"{scenario_path}: frame {w.count + 1} falls {int(ts) - int(scen.start):.3g} s after the "
                    f"start, past the year 2106 that a capture's 32-bit seconds can hold; give earlier "
                    f"start, at_us or interval_us"
                )
            w.write(lk.record(ts, f), ts, flush=False)
    return w.count
