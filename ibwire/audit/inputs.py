"""Stream one incident's captures through the audit, and load --state from any of its sources."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Iterable, Optional

from ibwire.audit.engine import Audit, Result
from ibwire.audit.packets import BulkReader, DataGroup, audit_fields
from ibwire.audit.policy import Policy
from ibwire.audit.result import Evidence
from ibwire.audit.state import FabricState, from_fabric_json, from_live, from_sysfs
from ibwire.audit.tenants import Tenants
from ibwire.errors import UserError
from ibwire.files import open_capture


def load_state(spec: Optional[str]) -> FabricState:
    """--state: 'live', 'sysfs' or 'sysfs:ROOT', 'capture' (the capture's own MADs), or a fabric JSON file."""
    if not spec or spec == "capture":
        return FabricState()
    if spec == "live":
        return from_live()
    if spec == "sysfs" or spec.startswith("sysfs:"):
        return from_sysfs(spec[6:] or None)
    if not Path(spec).exists():
        raise UserError(f"--state {spec}: no such file; give a fabric JSON file, 'live', 'sysfs' or 'capture'")
    return from_fabric_json(spec)


def audit_captures(
    paths: Iterable[str],
    policy: Policy,
    tenants: Optional[Tenants],
    state: FabricState,
    display_filter: Optional[str] = None,
) -> Result:
    """The audit of one incident's captures; with `display_filter` (ibwire.decode.filter's language) it sees only
    the frames the filter selects, and its result says so."""
    from ibwire.decode.filter import compile_filter

    paths = [str(p) for p in paths]
    flt = compile_filter(display_filter) if display_filter else None
    audit = Audit(policy, tenants, state)
    ev = Evidence(captures=len(paths))
    offset = 0  # several files of one incident: frames are numbered on, file after file
    for path in paths:
        try:
            open_capture(path)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"cannot read capture {path} ({e}); give a pcap or pcapng file") from None
        shared = {id(x): x for x in (audit.policy, audit.tenants, audit.state)}  # only read while fed: not copied
        before = copy.deepcopy((audit, ev), shared)
        last = _bulk(path, offset, audit, ev, flt)
        if last is None:  # the walk found damage: the careful reader reads the file instead
            audit, ev = before
            last = _careful(path, offset, audit, ev, flt)
        offset += last
    finding = ev.finding()
    res = audit.finish([finding] if finding is not None else [])
    res.evidence = ev
    res.display_filter = display_filter
    return res


def _bulk(path: str, offset: int, audit: Audit, ev: Evidence, flt) -> Optional[int]:
    """Feed one capture through the compiled records; its last frame number, or None at file damage."""
    reader = BulkReader(path, flt)
    for item in reader:
        if reader.problems:
            return None
        if isinstance(item, DataGroup):
            ev.count_group(item.packets, item.truncated)
            audit.feed_group(offset, item)
        else:
            frame, flat = item
            ev.count(offset + frame.number, frame, flat)
            audit.feed(offset + frame.number, flat, frame.wirelen or frame.caplen)
    return None if reader.problems else reader.last


def _careful(path: str, offset: int, audit: Audit, ev: Evidence, flt) -> int:
    """Feed one (damaged) capture frame by frame through the reader that resynchronises after damage."""
    cap = open_capture(path)
    last, t0, prev = 0, None, None
    if flt is not None:
        from ibwire.decode.stream import detail_flat
    for frame, flat in audit_fields(cap, path):
        last = frame.number
        if flt is not None:
            t0 = frame.time if t0 is None else t0
            full = detail_flat(frame, t0, prev)
            prev = frame.time
            if not flt(full):
                continue
            flat = full
        ev.count(offset + frame.number, frame, flat)
        audit.feed(offset + frame.number, flat, frame.wirelen or frame.caplen)
    ev.skipped += cap.skipped
    ev.lost_bytes += cap.lost_bytes
    ev.cut += [f"{path} ends inside frame {offset + n} ({missing} bytes of it missing)" for n, missing in cap.cut_short]
    ev.problems += [f"{path}: {p}" for p in cap.problems]
    return last
