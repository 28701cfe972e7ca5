"""What the audit reports: one Finding per rule hit, ranked by severity (info < warning < attempt < breach)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

SEVERITIES = ("info", "warning", "attempt", "breach")
EVIDENCE_FRAMES = 8  # frame numbers kept as evidence per finding (and per flow)


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)


@dataclass
class Finding:
    rule: str
    severity: str
    description: str
    frames: list = field(default_factory=list)
    tenants: tuple = ()  # (source tenant, destination tenant) when the finding is about a pair
    port: Optional[int] = None  # port GUID when the finding is about one port
    src: Optional[int] = None  # port GUID of the sender (requester, trap issuer, SMP sender)
    dst: Optional[int] = None  # port GUID of the target
    pkey: Optional[int] = None
    trap: Optional[int] = None
    ends: tuple = ()  # (source Side, destination Side) of a flow as the wire shows them
    line: Optional[int] = None  # partitions.conf line the finding is about
    mgid: Optional[str] = None  # multicast group of a join
    number: int = 0  # 1-based rank in the report, named in the evidence file's comments
    wireshark: dict = field(default_factory=dict)  # display filters reproducing it (wsfilter.filters)

    def as_dict(self) -> dict:
        d = {
            "number": self.number,
            "rule": self.rule,
            "severity": self.severity,
            "description": self.description,
            "frames": self.frames,
            "wireshark": self.wireshark,
        }
        if self.tenants:
            d["tenants"] = list(self.tenants)
        for key in ("port", "src", "dst"):
            if getattr(self, key) is not None:
                d[f"{key}_guid"] = f"0x{getattr(self, key):016x}"
        if self.pkey is not None:
            d["pkey"] = f"0x{self.pkey:04x}"
        if self.trap is not None:
            d["trap"] = self.trap
        if self.line is not None:
            d["policy_line"] = self.line
        for key, side in zip(("src", "dst"), self.ends):
            d.update({f"{key}_{k}": getattr(side, k) for k in ("mac", "ip", "vlan") if getattr(side, k) is not None})
        return d


def dedupe(findings: list) -> list:
    """Findings for the two directions of one conversation collapse into one (the first seen); worst first."""
    seen, out = set(), []
    for f in findings:
        key = (
            f.rule,
            frozenset(f.tenants) if f.tenants else None,
            f.port,
            tuple(sorted(f.frames)) if f.frames else f.description,
        )
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    out.sort(key=lambda f: (-severity_rank(f.severity), f.rule, f.frames[:1]))
    return out
