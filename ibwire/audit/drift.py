"""pkey-drift: the programmed P_Key table (IBA 14.2.5.7) against the table the policy gives the port.

Extra keys are a breach, missing keys a warning; tables come from --state or from P_KeyTable GetResp
sent to the master SM only (see mads.MadObserver).
"""

from __future__ import annotations

from ibwire.audit.findings import EVIDENCE_FRAMES, Finding
from ibwire.audit.identity import Identities
from ibwire.audit.policy import Policy


def drift_findings(policy: Policy, ids: Identities, table_frames: dict) -> list:
    """table_frames: port GUID -> [(frame, P_Keys of that block)] as the capture showed them."""
    out = []
    for guid, ps in sorted(ids.ports.ports.items()):
        table = ps.table()
        if table is None:
            continue
        want = policy.expected_table(ids.node(guid))
        extra, missing = sorted(table - want), sorted(want - table)
        if not extra and not missing:
            continue
        text = (
            f"port 0x{guid:016x}"
            + (f" (LID {ps.lid})" if ps.lid else "")
            + (f" {ps.description}" if ps.description else "")
            + f": table from {ps.pkey_source}"
        )
        if extra:
            text += "; not in policy: " + ", ".join(_pk(p) for p in extra)
        if missing:
            text += "; policy gives but table lacks: " + ", ".join(_pk(p) for p in missing)
        seen = table_frames.get(guid, [])
        frames = [n for n, keys in seen if keys & set(extra)] if extra else [n for n, _ in seen[-1:]]
        out.append(
            Finding(
                "pkey-drift",
                "breach" if extra else "warning",
                text,
                frames[:EVIDENCE_FRAMES],
                port=guid,
                pkey=extra[0] if len(extra) == 1 else None,
            )
        )
    return out


def _pk(p: int) -> str:
    return f"0x{p:04x} ({'full' if p & 0x8000 else 'limited'})"
