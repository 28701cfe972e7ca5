"""An audit's outcome: findings, the tenant × tenant traffic matrix and the pass/fail verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from dissectors.numbers import (
    ETHERTYPE_LLDP,
    ETHERTYPE_MAC_CONTROL,
    ETHERTYPE_ROCE_V1,
    ETHERTYPE_SLOW,
    LINKTYPE_ERF,
    LINKTYPE_INFINIBAND,
    LINKTYPE_IPOIB,
    ROCE_V2_PORT,
)
from ibwire.audit.findings import EVIDENCE_FRAMES, Finding, severity_rank
from ibwire.audit.identity import NO_TENANT
from ibwire.audit.state import FabricState


@dataclass
class Evidence:
    """What the captures could and could not show.  A frame the audit cannot read might hold a breach, so
    damage is a finding (evidence-incomplete, warning), and an audit with (almost) nothing readable has no
    verdict but INCOMPLETE (exit 2)."""

    captures: int = 0
    frames: int = 0  # frames read from the files
    packets: int = 0  # of them IB/RoCE packets (with a BTH), what the audit judges
    other: int = 0  # frames that carry no IB/RoCE packet (ARP, TCP, ...): out of scope
    out_of_scope: dict = field(default_factory=dict)  # those by protocol ("tcp": 770)
    damaged: int = 0  # malformed: headers that could not be read whole
    truncated: int = 0  # captured shorter than on the wire
    undecodable: int = 0  # link types ibwire does not decode
    skipped: int = 0  # records or blocks the reader found damaged and could not deliver
    lost_bytes: int = 0  # bytes of the files no frame came from
    cut: list = field(default_factory=list)  # where a file ends inside a record (the capture was cut)
    examples: list = field(default_factory=list)  # frame numbers of damaged/undecodable frames
    problems: list = field(default_factory=list)  # the readers' own words, per file

    def count(self, number: int, frame, flat: dict) -> None:
        self.frames += 1
        if frame.caplen < frame.wirelen:
            self.truncated += 1
        bad = False
        if "bth.opcode" in flat:
            self.packets += 1
            bad = bool(flat.get("_ws.malformed"))
        elif "frame.protocols" not in flat:  # decode_frame read no layer: a link type ibwire cannot read
            self.undecodable += 1
            self._example(number)
            return
        elif flat.get("_ws.malformed") and rdma_looking(frame.linktype, flat):
            bad = True
        else:
            self.other += 1
            proto = scope_name(flat)
            self.out_of_scope[proto] = self.out_of_scope.get(proto, 0) + 1
        if bad:
            self.damaged += 1
            self._example(number)

    def count_group(self, packets: int, truncated: int) -> None:
        """Sound data packets counted together (audit.packets.DataGroup)."""
        self.frames += packets
        self.packets += packets
        self.truncated += truncated

    def _example(self, number: int) -> None:
        if len(self.examples) < EVIDENCE_FRAMES:
            self.examples.append(number)

    def unusable(self) -> Optional[str]:
        """Why the captures given cannot support any verdict, or None."""
        if not self.captures:
            return None  # a state-only audit reads no capture
        if not self.frames:
            return "the captures hold no frame" + (" that could be read" if self.skipped else "")
        if not self.packets:
            return f"none of the {self.frames} frames is an InfiniBand or RoCE packet ibwire can read"
        bad = self.damaged + self.undecodable + self.skipped
        if 2 * bad > self.frames + self.skipped:
            return f"{bad} of {self.frames + self.skipped} frames are damaged or undecodable"
        return None

    def shortfall(self) -> Optional[str]:
        """What the audit could not read, in a few words ("3 of 234 frames damaged"), or None when nothing."""
        bad = [
            (n, what)
            for n, what in ((self.damaged, "damaged"), (self.skipped, "unreadable"), (self.undecodable, "undecodable"))
            if n
        ]
        parts = []
        if bad:
            n = sum(k for k, _ in bad)
            kinds = bad[0][1] if len(bad) == 1 else "unread (" + ", ".join(f"{k} {w}" for k, w in bad) + ")"
            parts.append(f"{n} of {self.frames + self.skipped} frames {kinds}")
        if self.lost_bytes:
            parts.append(f"{self.lost_bytes} bytes of the captures unread")
        return "; ".join(parts + self.cut) or None

    def finding(self) -> Optional[Finding]:
        why = self.unusable()
        counts = [
            f"{n} {what}"
            for n, what in (
                (self.damaged, "damaged"),
                (self.skipped, "unreadable (skipped)"),
                (self.undecodable, "of a link type ibwire cannot decode"),
            )
            if n
        ]
        if not counts and not self.lost_bytes and not why and not self.cut:
            return None
        if self.truncated:  # cut by the snap length: headers still read, payloads not needed
            counts.append(f"{self.truncated} truncated")
        text = f"evidence incomplete: of {self.frames + self.skipped} frames " + (", ".join(counts) or "none lost")
        if self.lost_bytes:
            text += f"; {self.lost_bytes} bytes of the captures unread"
        text += "".join(f"; {c}" for c in self.cut)
        text += f"; {why}, so there is no verdict" if why else "; packets in them were not audited"
        return Finding("evidence-incomplete", "warning", text, frames=list(self.examples))

    def as_dict(self) -> dict:
        d = {
            k: getattr(self, k)
            for k in ("frames", "packets", "other", "damaged", "truncated", "undecodable", "skipped", "lost_bytes")
        }
        d["out_of_scope"] = dict(sorted(self.out_of_scope.items(), key=lambda kv: -kv[1]))
        d["complete"] = not (
            self.damaged or self.undecodable or self.skipped or self.lost_bytes or self.cut or self.unusable()
        )
        d["cut"] = self.cut
        d["problems"] = self.problems
        return d


_IB_LINKTYPES = (
    LINKTYPE_ERF,
    LINKTYPE_IPOIB,
    LINKTYPE_INFINIBAND,
)  # ERF (IB records), IPoIB, InfiniBand: every frame is IB


def rdma_looking(linktype: int, flat: dict) -> bool:
    """Whether a frame the decoder could not read whole was (or claimed to be) InfiniBand or RoCE."""
    return bool(
        flat.get("infiniband")
        or linktype in _IB_LINKTYPES
        or flat.get("eth.type") == ETHERTYPE_ROCE_V1
        or ROCE_V2_PORT in (flat.get("udp.srcport"), flat.get("udp.dstport"))
    )


def scope_name(flat: dict) -> str:
    """The protocol an out-of-scope frame carries, as tshark names it (tcp, udp, arp, icmpv6, lldp …)."""
    names = [n for n in str(flat.get("frame.protocols", "")).split(":") if n not in ("data", "ethertype", "")]
    if names and names[-1] not in ("eth", "vlan", "sll"):
        return names[-1]
    t = flat.get("eth.type")
    return {ETHERTYPE_LLDP: "lldp", ETHERTYPE_MAC_CONTROL: "macc", ETHERTYPE_SLOW: "slow"}.get(
        t, f"ethertype 0x{t:04x}" if t is not None else "other"
    )


class Result:
    def __init__(self, audit):
        self.audit = audit  # the engine.Audit that produced it (counts, flows, mappings)
        self.findings: list = []
        self.matrix: dict = {}  # (src tenant, dst tenant) -> [packets, bytes]
        self.ports: Optional[FabricState] = None
        self.evidence = Evidence()  # what the captures could and could not show (audit.inputs)
        self.display_filter: Optional[str] = None  # the -Y filter the captures were read through

    def add_cell(self, a: str, b: str, packets: int, nbytes: int) -> None:
        cell = self.matrix.setdefault((a, b), [0, 0])
        cell[0] += packets
        cell[1] += nbytes

    def tenant_names(self) -> list:
        names = list(self.audit.tenants.names)
        if any(NO_TENANT in k for k in self.matrix):
            names.append(NO_TENANT)
        return names

    def _no_tenants(self) -> Optional[str]:
        """Why no pair of tenants can be judged (no tenant, or none with an endpoint), or None."""
        if not self.audit.tenants.names:
            return "no tenant is declared with --tenants"
        if not self.audit.tenants.endpoints:
            return "no declared tenant has an endpoint"
        return None

    def _tables_known(self) -> bool:
        return self.ports is not None and any(p.pkeys is not None for p in self.ports.ports.values())

    def unjudged(self) -> Optional[str]:
        """What keeps a pass from meaning anything: no tenant pair to judge, or (a state-only audit) no
        programmed table either; None when something was judged."""
        why = self._no_tenants()
        if why:
            return f"no tenant pair judged: {why}"
        if not self.evidence.captures and not self._tables_known():
            return "nothing judged but the policy: no capture given and no programmed P_Key table known"
        return None

    def checks(self) -> dict:
        """Which checks ran and which could not, with why: {"ran": [...], "not_run": {check: why}}."""
        ran, not_run = ["the policy as opensm reads it"], {}
        tables = "programmed P_Key tables against the policy"
        if self._tables_known():
            ran.append(tables)
        else:
            not_run[tables] = "no programmed table known: give --state, or capture the SM's sweep"
        watched = ["P_Key membership of the traffic", "subnet management (SMs, SubnSet senders, traps, IPoIB joins)"]
        if self.evidence.captures:
            ran += watched
        else:
            not_run.update(dict.fromkeys(watched, "no capture given"))
        why = self._no_tenants() or (None if self.evidence.captures else "no capture given")
        if why:
            not_run["tenant × tenant isolation"] = why
        else:
            ran.append("tenant × tenant isolation")
        return {"ran": ran, "not_run": not_run}

    def worst(self) -> Optional[str]:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)

    def verdict(self, fail_on: str) -> str:
        """FAIL at a finding at or above `fail_on` (evidence-incomplete included); otherwise INCOMPLETE
        when the captures could not support a verdict; otherwise PASS, which says so when frames went
        unread, a display filter chose the frames or no pair of tenants could be judged (no verdict on
        nothing): "PASS (evidence incomplete: 3 of 234 frames damaged)", never a bare PASS."""
        w = self.worst()
        if w is not None and severity_rank(w) >= severity_rank(fail_on):
            return "FAIL"
        if self.evidence.unusable():
            return "INCOMPLETE"
        chosen = f"only the frames matching '{self.display_filter}' audited" if self.display_filter else None
        short = "; ".join(x for x in (self.evidence.shortfall(), chosen, self.unjudged()) if x)
        return f"PASS (evidence incomplete: {short})" if short else "PASS"

    def exit_status(self, fail_on: str) -> int:
        """0 PASS on complete evidence, 1 FAIL, 2 INCOMPLETE (no verdict), 4 PASS on incomplete evidence."""
        return {"PASS": 0, "FAIL": 1, "INCOMPLETE": 2}.get(self.verdict(fail_on), 4)
