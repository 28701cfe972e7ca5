"""The isolation audit: packets, declared policy and hardware state checked against each other.

Packets stream through `Audit.feed(frame_number, flat_fields, length)` once: data packets are folded
into flows (traffic.Traffic), management datagrams update what the capture says about the subnet
(mads.MadObserver).  `Audit.finish()` merges that with --state, ties ends to ports and tenants
(identity) and applies the rules: the policy's own reading (policy-reading, policy-fallback), traffic (P_Key and tenant rules on data, RoCE included),
management (SMs, SubnSet senders, traps, IPoIB joins) and drift (programmed P_Key tables).
"""

from __future__ import annotations

from typing import Optional

from ibwire.audit.drift import drift_findings
from ibwire.audit.fields import as_int
from ibwire.audit.findings import dedupe
from ibwire.audit.identity import NO_TENANT, Identities, map_endpoints
from ibwire.audit.mads import MadObserver
from ibwire.audit.management import join_findings, sm_findings, trap_findings
from ibwire.audit.policy import Policy, policy_findings
from ibwire.audit.result import Result
from ibwire.audit.state import FabricState
from ibwire.audit.tenants import Tenants
from ibwire.audit.traffic import Traffic, default_full_findings, flow_findings
from ibwire.audit.wsfilter import filters

__all__ = ["Audit", "Result"]


class Audit:
    def __init__(self, policy: Policy, tenants: Optional[Tenants] = None, state: Optional[FabricState] = None):
        self.policy = policy
        self.tenants = tenants or Tenants()
        self.state = state or FabricState()
        self.traffic = Traffic()
        self.mads = MadObserver(self.state)
        self.packets = 0
        self.frames_seen = 0
        self.mappings: list = []  # (endpoint, how it was mapped)
        self.unnamed: dict = {}  # Side text -> packets, for ends no tenant owns

    def feed(self, number: int, flat: dict, length: int) -> None:
        self.frames_seen += 1
        if "bth.opcode" not in flat:
            return
        self.packets += 1
        mclass = flat.get("mad.mgmtclass")
        if mclass is not None:
            self.mads.feed(number, flat, as_int(mclass))
        else:
            self.traffic.add(number, flat, length)

    def feed_group(self, offset: int, g) -> None:
        """Data packets grouped by the compiled reader (audit.packets.DataGroup); frame numbers from `offset`."""
        self.frames_seen += g.packets
        self.packets += g.packets
        self.traffic.add_group([offset + f for f in g.frames], g.flat, g.packets, g.bytes)

    def finish(self, extra: tuple = ()) -> Result:
        """The findings of everything fed, plus `extra` ones (what the captures could not show), numbered."""
        ports = FabricState()
        ports.merge(self.state)
        ports.merge(self.mads.wire)
        self.mappings += map_endpoints(self.tenants, ports)
        ids = Identities(self.tenants, ports)
        res = Result(self)
        for fl in self.traffic.flows.values():
            a, b = ids.resolve(fl.src), ids.resolve(fl.dst)
            res.add_cell(a.tenant, b.tenant, fl.packets, fl.bytes)
            for end, r in ((fl.src, a), (fl.dst, b)):
                if r.tenant == NO_TENANT:
                    self.unnamed[end.text()] = self.unnamed.get(end.text(), 0) + fl.packets
        findings = policy_findings(self.policy, ports.ports)
        findings += flow_findings(self.traffic, self.policy, ids)
        findings += default_full_findings(self.traffic, self.policy, self.tenants, ids)
        findings += sm_findings(self.mads, ids)
        findings += trap_findings(self.mads, ids)
        findings += join_findings(self.mads, self.policy, ids)
        findings += drift_findings(self.policy, ids, self.mads.table_frames)
        res.findings = dedupe(findings + list(extra))
        for number, f in enumerate(res.findings, 1):
            f.number, f.wireshark = number, filters(number, f, ids)
        res.ports = ports
        return res
