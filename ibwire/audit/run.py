"""Stream one incident's captures through the audit, and load --state from any of its sources."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from ..errors import UserError
from ..readers import open_capture
from .engine import Audit, Result
from .packets import audit_fields
from .policy import Policy
from .result import Evidence
from .state import FabricState, from_fabric_json, from_live, from_sysfs
from .tenants import Tenants


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


def audit_captures(paths: Iterable[str], policy: Policy, tenants: Optional[Tenants],
                   state: FabricState) -> Result:
    paths = [str(p) for p in paths]
    audit = Audit(policy, tenants, state)
    ev = Evidence(captures=len(paths))
    offset = 0          # several files of one incident: frames are numbered on, file after file
    for path in paths:
        try:
            cap = open_capture(path)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f"cannot read capture {path} ({e}); give a pcap or pcapng file") from None
        last = 0
        for frame, flat in audit_fields(cap, path):
            last = frame.number
            ev.count(offset + frame.number, frame, flat)
            audit.feed(offset + frame.number, flat, frame.wirelen or frame.caplen)
        ev.skipped += cap.skipped
        ev.lost_bytes += cap.lost_bytes
        ev.problems += [f"{path}: {p}" for p in cap.problems]
        offset += last
    finding = ev.finding()
    res = audit.finish([finding] if finding is not None else [])
    res.evidence = ev
    return res

