"""The isolation audit: packets, declared policy and hardware state checked against each other.

Packets stream through `Audit.feed(frame_number, flat_fields, length)` once; data packets are folded
into per-(source, destination, P_Key) aggregates holding counts, bytes and the first evidence frames,
management datagrams update what the capture says about the subnet (LIDs, P_Key tables, SMs, traps,
multicast joins).  `Audit.finish()` ties ends to ports and tenants and applies the rules.

Rule ids and their meaning (severity in brackets; attempt becomes breach when the target answers —
any packet from the destination back to the source in the same P_Key):
  pkey-not-shared      data packet whose P_Key is not a policy partition of both ends [attempt/breach]
  limited-limited      both ends only limited members of the packet's partition     [attempt/breach]
  cross-tenant-attempt traffic between tenants sharing no usable partition (the default one does not
                       count: meeting only there is the ALL=full mistake), unanswered  [attempt]
  cross-tenant-breach  the same, answered by the target                              [breach]
  roce-vlan-crossing   RoCE traffic between tenants (separated by VLAN / IP subnet)  [attempt/breach]
                       (a RoCE end is its tenant's by MAC/IP/VLAN, or by MAC/IP alone when the frame carries
                       a foreign VLAN: that is how a crossing looks on the wire)
  trap                 P_Key / Q_Key / M_Key violation trap 256-259 sent to the SM, offender decoded [attempt]
  undeclared-pkey      a P_Key on the wire that partitions.conf does not declare       [warning]
  default-partition-full two tenants are both full members of the default partition [warning/breach]
  ipoib-join-foreign   MCMemberRecord join to the IPoIB group of a partition the port is not in: granted by
                       the SA (SubnAdmGetResp status 0) [breach], refused or unanswered [attempt]
  smp-set-from-non-sm  SubnSet from any LID other than the master SM's (directed route from the permissive
                       LID: from the route's root port, the one answering NodeInfo over the empty path) [breach];
                       [attempt] when every such Set was refused: its target sent trap 256 (bad M_Key) naming
                       the sender's LID, method and attribute
  multiple-master-sm   more than one port claims SMState MASTER; the first claim is the master   [breach]
  pkey-drift           programmed P_Key table differs from the policy (extra keys: breach, missing: warning);
                       tables are read from P_KeyTable GetResp sent to the master SM only
Endpoints: port GUID -> LID from NodeInfo and PortInfo(Set) over the same directed route, or from --state;
a pairwise finding is told from its initiator's side (who sent first in that partition, multicast included).
IBA references: 10.9 (partitioning, limited/full), 14.2.5.7 (P_KeyTable), 14.2.5.13 (SMInfo),
14.2.5.1 / Table 118 (traps 256-259), 15.2.5.17 (MCMemberRecord), 13.5.3 (SMP methods).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Optional

from .policy import DEFAULT_PKEY, Policy, Port
from .state import FabricState, PortState, gid_port_guid
from .tenants import Endpoint, Tenants

SEVERITIES = ("info", "warning", "attempt", "breach")
NO_TENANT = "(no tenant)"
EVIDENCE_FRAMES = 8
TRAPS = {256: "bad M_Key", 257: "bad P_Key", 258: "bad Q_Key", 259: "bad P_Key at switch external port"}
SM_STATES = {0: "NOTACTIVE", 1: "DISCOVERING", 2: "STANDBY", 3: "MASTER"}
PERMISSIVE_LID = 0xFFFF


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)


@dataclass
class Finding:
    rule: str
    severity: str
    description: str
    frames: list = field(default_factory=list)
    tenants: tuple = ()           # (source tenant, destination tenant) when the finding is about a pair
    port: Optional[int] = None    # port GUID when the finding is about one port
    src: Optional[int] = None     # port GUID of the sender (requester, trap issuer, SMP sender)
    dst: Optional[int] = None     # port GUID of the target
    pkey: Optional[int] = None
    trap: Optional[int] = None
    ends: tuple = ()              # RoCE: (source Side, destination Side), which have no port GUID

    def as_dict(self) -> dict:
        d = {"rule": self.rule, "severity": self.severity, "description": self.description,
             "frames": self.frames}
        if self.tenants:
            d["tenants"] = list(self.tenants)
        for key in ("port", "src", "dst"):
            if getattr(self, key) is not None:
                d[f"{key}_guid"] = f"0x{getattr(self, key):016x}"
        if self.pkey is not None:
            d["pkey"] = f"0x{self.pkey:04x}"
        if self.trap is not None:
            d["trap"] = self.trap
        for key, side in zip(("src", "dst"), self.ends):
            d.update({f"{key}_{k}": getattr(side, k) for k in ("mac", "ip", "vlan") if getattr(side, k) is not None})
        return d


@dataclass
class Side:
    """One end of a packet as the wire shows it."""
    kind: str                     # ib | roce
    lid: Optional[int] = None
    gid: Optional[str] = None
    mac: Optional[str] = None
    ip: Optional[str] = None
    vlan: Optional[int] = None

    def key(self) -> tuple:
        return (self.kind, self.lid, self.gid, self.mac, self.ip, self.vlan)

    def speaker(self) -> tuple:
        """The sending port whatever it addresses: its LID alone (a GRH is added for multicast), or RoCE key."""
        return ("ib", self.lid) if self.kind == "ib" and self.lid is not None else self.key()

    def text(self) -> str:
        if self.kind == "ib":
            return f"LID {self.lid}" + (f" GID {self.gid}" if self.gid else "")
        return " ".join(x for x in (self.ip, self.mac, f"vlan {self.vlan}" if self.vlan is not None else "") if x)


@dataclass
class Flow:
    src: Side
    dst: Side
    pkey: int
    packets: int = 0
    bytes: int = 0
    frames: list = field(default_factory=list)


@dataclass
class Resolved:
    """A packet end tied (or not) to a port and a tenant, and how."""
    guid: Optional[int]
    tenant: str
    how: str


def _int(v) -> Optional[int]:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    try:
        return int(str(v), 0)
    except ValueError:
        return None


def _gid_text(v) -> Optional[str]:
    if not v:
        return None
    try:
        return str(ipaddress.IPv6Address(v if isinstance(v, str) else bytes(v)))
    except ValueError:
        return str(v)


def _first(flat: dict, *suffixes):
    """Value of the first key that equals or ends with one of the suffixes (MAD layers nest names)."""
    for s in suffixes:
        if s in flat:
            return flat[s]
    for k, v in flat.items():
        for s in suffixes:
            if k.endswith("." + s.split(".")[-1]) and k.split(".")[0] == s.split(".")[0]:
                return v
    return None


class Audit:
    def __init__(self, policy: Policy, tenants: Optional[Tenants] = None, state: Optional[FabricState] = None):
        self.policy = policy
        self.tenants = tenants or Tenants()
        self.state = state or FabricState()
        self.wire = FabricState(sources=["capture SM traffic"])   # what the capture's MADs say
        self.flows: dict = {}
        self.packets = 0
        self.bytes = 0
        self.frames_seen = 0
        self.findings: list = []
        self.smp_sets: list = []          # (frame, sender LID or None for the directed-route root, DLID, attribute)
        self.traps: list = []             # (frame, trap number, details, slid)
        self.joins: list = []             # (frame, mgid, port gid, slid, transaction id)
        self.sa_answers: dict = {}        # transaction id -> (frame, status) of SubnAdmGetResp(MCMemberRecord)
        self.table_frames: dict = {}      # port GUID -> [(frame, set of P_Keys in that block)]
        self._dr_ports: dict = {}         # DR path -> port GUID (NodeInfo seen over that path)
        self._dr_root: Optional[int] = None   # port GUID answering NodeInfo over the empty path
        self.first_seen: dict = {}        # (Side key, P_Key base) -> first frame sent, unicast or multicast
        self.mappings: list = []          # (endpoint, text)
        self.unnamed: dict = {}           # Side text -> packets

    # -- streaming ---------------------------------------------------------------------------
    def feed(self, number: int, flat: dict, length: int) -> None:
        self.frames_seen += 1
        if "bth.opcode" not in flat:
            return
        self.packets += 1
        self.bytes += length
        mclass = flat.get("mad.mgmtclass")
        if mclass is not None:
            self._mad(number, flat, _int(mclass))
            return
        src, dst = self._sides(flat)
        pkey = _int(flat.get("bth.p_key")) or 0
        self.first_seen.setdefault((src.speaker(), pkey & 0x7FFF), number)
        key = (src.key(), dst.key(), pkey)
        fl = self.flows.get(key)
        if fl is None:
            fl = self.flows[key] = Flow(src, dst, pkey)
        fl.packets += 1
        fl.bytes += length
        if len(fl.frames) < EVIDENCE_FRAMES:
            fl.frames.append(number)

    def _sides(self, flat: dict):
        vlan = _int(flat.get("vlan.id"))
        if "lrh.slid" in flat:
            return (Side("ib", _int(flat["lrh.slid"]), _gid_text(flat.get("grh.sgid"))),
                    Side("ib", _int(flat["lrh.dlid"]), _gid_text(flat.get("grh.dgid"))))
        sip = flat.get("ip.src") or flat.get("ipv6.src") or flat.get("grh.sgid")
        dip = flat.get("ip.dst") or flat.get("ipv6.dst") or flat.get("grh.dgid")
        return (Side("roce", mac=flat.get("eth.src"), ip=_ip_text(sip), vlan=vlan),
                Side("roce", mac=flat.get("eth.dst"), ip=_ip_text(dip), vlan=vlan))

    def _mad(self, number: int, flat: dict, mclass: int) -> None:
        method = _int(flat.get("mad.method")) or 0
        attr = _int(flat.get("mad.attributeid")) or 0
        slid = _int(flat.get("lrh.slid"))
        dlid = _int(flat.get("lrh.dlid"))
        dr = mclass == 0x81
        path = _dr_path(flat) if dr else ""
        if mclass in (0x01, 0x81):
            if method == 0x02:                                  # SubnSet
                sender = _int(flat.get("smpdirected.drslid")) if dr else slid
                if sender == PERMISSIVE_LID:
                    sender = slid if slid != PERMISSIVE_LID else None   # None: the directed-route root
                self.smp_sets.append((number, sender, dlid, attr))
            if method == 0x05 and attr == 0x0002:               # SubnTrap(Notice)
                self._trap(number, flat, slid)
            if method == 0x81:                                  # GetResp: what the port really holds
                if not dr and attr == 0x0016 and not self._to_master(dlid):
                    return                                      # a table shown to a non-SM requester
                self._smp_data(number, flat, attr, slid if not dr else None, path)
        elif mclass == 0x03:
            if method == 0x05 and attr == 0x0002:
                self._trap(number, flat, slid)
            if method == 0x02 and attr == 0x0038:               # SubnAdmSet(MCMemberRecord): join
                self.joins.append((number, _gid_text(_first(flat, "mcmemberrecord.mgid")),
                                   _gid_text(_first(flat, "mcmemberrecord.portgid")), slid,
                                   _int(flat.get("mad.transactionid"))))
            if method == 0x81 and attr == 0x0038:               # the SA's answer: status 0 grants the join
                self.sa_answers.setdefault(_int(flat.get("mad.transactionid")),
                                           (number, _int(flat.get("mad.status")) or 0))

    def _smp_data(self, number, flat, attr, lid_of_responder, path):
        if attr == 0x0011:                                      # NodeInfo
            guid = _int(_first(flat, "nodeinfo.portguid"))
            if not guid:
                return
            ps = self.wire.port(guid, "capture NodeInfo")
            ntype = _int(_first(flat, "nodeinfo.nodetype"))
            ps.node_type = {1: "ca", 2: "switch", 3: "router"}.get(ntype, ps.node_type)
            ps.node_guid = _int(_first(flat, "nodeinfo.nodeguid"))
            if lid_of_responder and lid_of_responder != PERMISSIVE_LID:
                ps.lid = lid_of_responder
                ps.source = "capture NodeInfo (LID-routed response)"
            if path:
                self._dr_ports[path] = guid
                if path == "00":
                    self._dr_root = guid
        elif attr == 0x0015:                                    # PortInfo
            lid = _int(_first(flat, "portinfo.lid"))
            guid = self._dr_ports.get(path) if path else None
            if guid is None and lid_of_responder:
                guid = next((p.guid for p in self.wire.ports.values() if p.lid == lid_of_responder), None)
            if guid is not None and lid:
                ps = self.wire.port(guid, "capture PortInfo")
                ps.lid = lid
                ps.source = "capture NodeInfo+PortInfo over the same directed route" if path else \
                    "capture PortInfo (LID-routed response)"
        elif attr == 0x0016:                                    # P_KeyTable
            guid = self._dr_ports.get(path) if path else None
            if guid is None and lid_of_responder:
                guid = next((p.guid for p in self.wire.ports.values() if p.lid == lid_of_responder), None)
            if guid is None:
                return
            block = (_int(flat.get("mad.attributemodifier")) or 0) & 0xFFFF
            bases = _as_list(_first(flat, "p_keytable.p_keybase"))
            members = _as_list(_first(flat, "p_keytable.membershiptype"))
            if not bases:
                return
            ps = self.wire.port(guid, "capture")
            table = list(ps.pkeys or [])
            entries = {(int(b) & 0x7FFF) | (0x8000 if (i < len(members) and int(members[i])) else 0)
                       for i, b in enumerate(bases)} - {0, 0x8000}
            ps.pkeys = [p for p in table if p] if block else []
            ps.pkeys = sorted(set(ps.pkeys) | entries)
            ps.pkey_source = "capture P_KeyTable MADs (responses to the master SM)"
            self.table_frames.setdefault(guid, []).append((number, entries))
        elif attr == 0x0020:                                    # SMInfo
            guid = _int(_first(flat, "sminfo.guid"))
            st = _int(_first(flat, "sminfo.smstate"))
            if guid and st is not None:
                self.wire.sm_claims.setdefault(guid, set()).add((SM_STATES.get(st, str(st)), number))
                if st == 3:
                    self.wire.master_sm = self.wire.master_sm or guid

    def _trap(self, number, flat, slid):
        num = _int(_first(flat, "notice.trapnumberdeviceid", "notice.trapnumber"))
        if num not in TRAPS:
            return
        details = {k.split(".", 1)[1]: v for k, v in flat.items()
                   if k.startswith("trap.") and not isinstance(v, bool)}
        self.traps.append((number, num, details, slid))

    def _to_master(self, dlid) -> bool:
        """Is this LID the master SM's?  Unknown (no SM seen yet) counts as yes: nothing to contradict it."""
        sm = self.state.master_sm or self.wire.master_sm
        ps = self.wire.ports.get(sm) or self.state.ports.get(sm) if sm else None
        return ps is None or ps.lid is None or ps.lid == dlid

    # -- resolution ------------------------------------------------------------------------------
    def _all_ports(self) -> FabricState:
        merged = FabricState()
        merged.merge(self.state)
        merged.merge(self.wire)
        return merged

    def _resolve_endpoints(self, ports: FabricState):
        from .state import vf_port_guid
        for ep in self.tenants.endpoints:
            notes = []
            if ep.pf is not None and ep.port_guid is None:
                ep.port_guid = vf_port_guid(ep.pf, ep.vf)
                notes.append(f"{ep.pf} vf {ep.vf} -> port GUID from sysfs" if ep.port_guid else
                             f"{ep.pf} vf {ep.vf}: no port GUID in sysfs (unmapped)")
            if ep.port_guid is not None:
                ps = ports.ports.get(ep.port_guid)
                if ps and ps.lid:
                    notes.append(f"GUID 0x{ep.port_guid:016x} -> LID {ps.lid} from {ps.source}")
                elif ep.lid is None:
                    notes.append(f"GUID 0x{ep.port_guid:016x}: no LID known (matched by GID only)")
            ep.mapping = "; ".join(notes) or "declared directly"
            self.mappings.append((ep, ep.mapping))

    def _resolve(self, side: Side, ports: FabricState) -> Resolved:
        eps = self.tenants.endpoints
        if side.kind == "ib":
            guid, how = None, ""
            if (side.lid is not None and 0xC000 <= side.lid < 0xFFFF) or (side.gid or "").startswith("ff"):
                return Resolved(None, NO_TENANT, "multicast group")
            if side.gid:
                guid, how = gid_port_guid(side.gid), "GID interface ID"
            elif side.lid is not None:
                owners = ports.by_lid(side.lid)
                if len(owners) == 1:
                    guid, how = owners[0].guid, f"LID {side.lid} via {owners[0].source}"
                elif len(owners) > 1:
                    how = f"LID {side.lid} is shared by {len(owners)} ports and the packet has no GRH"
                else:
                    how = f"LID {side.lid} is not mapped to any port"
            for ep in eps:
                if ep.is_roce:
                    continue
                if (guid is not None and ep.port_guid == guid) or (side.gid and ep.gid == side.gid) or \
                        (ep.lid is not None and ep.lid == side.lid and not side.gid):
                    return Resolved(guid if guid is not None else ep.port_guid, ep.tenant, how or "declared LID")
                if guid is None and ep.port_guid is not None and side.lid is not None:
                    ps = ports.ports.get(ep.port_guid)
                    if ps and ps.lid == side.lid and len(ports.by_lid(side.lid)) == 1:
                        return Resolved(ep.port_guid, ep.tenant, f"LID via {ps.source}")
            return Resolved(guid, NO_TENANT, how)
        for ep in eps:
            if _roce_match(ep, side, with_vlan=True):
                return Resolved(None, ep.tenant, "RoCE MAC/IP/VLAN")
        for ep in eps:                    # a known MAC/IP in a foreign VLAN is still that endpoint
            if (ep.mac is not None or ep.net is not None) and _roce_match(ep, side, with_vlan=False):
                return Resolved(None, ep.tenant, f"RoCE MAC/IP (seen in VLAN {side.vlan}, declared {ep.vlan})")
        return Resolved(None, NO_TENANT, "no tenant endpoint matches")

    def _node(self, guid: int, ports: FabricState) -> Port:
        ps = ports.ports.get(guid)
        sm = ports.master_sm
        return Port(guid, ps.node_type if ps else "ca", guid == sm if sm else False)

    # -- rules -----------------------------------------------------------------------------------
    def finish(self) -> "Result":
        ports = self._all_ports()
        self._resolve_endpoints(ports)
        res = Result(self)
        findings = []
        resolved = {}
        for key, fl in self.flows.items():
            a = resolved.get(fl.src.key()) or resolved.setdefault(fl.src.key(), self._resolve(fl.src, ports))
            b = resolved.get(fl.dst.key()) or resolved.setdefault(fl.dst.key(), self._resolve(fl.dst, ports))
            res.add_cell(a.tenant, b.tenant, fl.packets, fl.bytes)
            for end, r in ((fl.src, a), (fl.dst, b)):
                if r.tenant == NO_TENANT:
                    self.unnamed[end.text()] = self.unnamed.get(end.text(), 0) + fl.packets
        undeclared = {}
        for key, fl in self.flows.items():
            a, b = resolved[fl.src.key()], resolved[fl.dst.key()]
            back = self.flows.get((fl.dst.key(), fl.src.key(), fl.pkey))
            answered = back is not None
            base = fl.pkey & 0x7FFF
            if answered and self._spoke_first(back.src, fl.src, base):
                fl, back, a, b = back, fl, b, a          # one conversation, told from its initiator's side
            pair = (a.tenant, b.tenant)
            if fl.src.kind == "ib" and not self.policy.declared(base):
                seen = undeclared.setdefault(base, ([], set()))
                seen[0].extend(fl.frames)
                seen[1].add(fl.pkey)
            if fl.src.kind == "roce":
                if a.tenant != b.tenant and NO_TENANT not in pair:
                    findings.append(self._pairwise("roce-vlan-crossing", fl, back, (a, b),
                                    f"RoCE traffic from tenant {a.tenant} ({fl.src.text()}) to tenant {b.tenant} "
                                    f"({fl.dst.text()})"))
                continue
            if a.guid is None or b.guid is None or not self.policy.declared(base):
                continue
            ma = self.policy.membership(self._node(a.guid, ports))
            mb = self.policy.membership(self._node(b.guid, ports))
            if base not in ma or base not in mb:
                missing = " and ".join(f"0x{g:016x}" for g, m in ((a.guid, ma), (b.guid, mb)) if base not in m)
                findings.append(self._pairwise("pkey-not-shared", fl, back, (a, b),
                                f"P_Key 0x{fl.pkey:04x} ({self.policy.name_of(base)}) from {fl.src.text()} to "
                                f"{fl.dst.text()}: the policy does not give it to port {missing}"))
            elif ma[base] == "limited" and mb[base] == "limited":
                findings.append(self._pairwise("limited-limited", fl, back, (a, b),
                                f"P_Key 0x{fl.pkey:04x} ({self.policy.name_of(base)}) between two limited "
                                f"members {fl.src.text()} -> {fl.dst.text()}" +
                                ("; the target answered, so enforcement is off" if answered else "")))
            if a.tenant != b.tenant and NO_TENANT not in pair and not _can_talk(ma, mb):
                rule = "cross-tenant-breach" if answered else "cross-tenant-attempt"
                via = " (they meet only in the default partition)" if base == DEFAULT_PKEY else ""
                findings.append(self._pairwise(rule, fl, back, (a, b),
                                f"tenant {a.tenant} ({fl.src.text()}) -> tenant {b.tenant} ({fl.dst.text()}) "
                                f"share no tenant partition{via}, P_Key 0x{fl.pkey:04x}"))
        for base, (frames, wire) in sorted(undeclared.items()):
            keys = ", ".join(f"0x{k:04x}" for k in sorted(wire))
            findings.append(Finding("undeclared-pkey", "warning",
                                    f"P_Key {keys} is on the wire but partitions.conf declares no partition "
                                    f"0x{base:04x}", sorted(set(frames))[:EVIDENCE_FRAMES],
                                    pkey=min(wire) if len(wire) == 1 else base))
        findings += self._default_full(ports)
        findings += self._sm_findings(ports)
        findings += self._trap_findings(ports)
        findings += self._join_findings(ports)
        findings += self._drift(ports)
        res.findings = _dedupe(findings)
        res.ports = ports
        return res

    def _spoke_first(self, x: Side, y: Side, base: int) -> bool:
        """Did x send in this partition (to anyone, multicast included) before y did?"""
        inf = float("inf")
        return self.first_seen.get((x.speaker(), base), inf) < self.first_seen.get((y.speaker(), base), inf)

    def _pairwise(self, rule, fl, back, ends, text) -> Finding:
        a, b = ends
        frames = fl.frames + (back.frames if back else [])
        sev = "breach" if back is not None else "attempt"
        text += f" ({fl.packets} packets" + (f", {back.packets} answered back)" if back else ", none answered)")
        return Finding(rule, sev, text, sorted(frames)[:EVIDENCE_FRAMES], (a.tenant, b.tenant),
                       src=a.guid, dst=b.guid, pkey=fl.pkey, ends=(fl.src, fl.dst) if fl.src.kind == "roce" else ())

    def _default_full(self, ports) -> list:
        out = []
        by_tenant = {}
        for ep in self.tenants.endpoints:
            if ep.port_guid is not None:
                m = self.policy.membership(self._node(ep.port_guid, ports)).get(DEFAULT_PKEY)
                if m in ("full", "both"):
                    by_tenant.setdefault(ep.tenant, []).append(ep)
        names = sorted(by_tenant)
        if len(names) < 2:
            return out
        frames, sev, talkers, first = [], "warning", set(), None
        default_flows = [fl for fl in self.flows.values() if fl.src.kind == "ib" and fl.pkey & 0x7FFF == DEFAULT_PKEY]
        for fl in default_flows:
            a, b = self._resolve(fl.src, ports), self._resolve(fl.dst, ports)
            if a.tenant != b.tenant and a.tenant in by_tenant and b.tenant in by_tenant:
                frames += fl.frames
                talkers.add(fl.src.speaker())
                sev = "breach"
                if first is None or fl.frames[0] < first[0]:
                    first = (fl.frames[0], a, b, fl)
        for fl in default_flows:          # their broadcasts (IPoIB ARP) reached every other tenant too
            if fl.src.speaker() in talkers and self._resolve(fl.dst, ports).how == "multicast group":
                frames += fl.frames
        src = dst = pkey = None
        if first is not None:
            _, a, b, fl = first
            back = self.flows.get((fl.dst.key(), fl.src.key(), fl.pkey))
            if back is not None and self._spoke_first(back.src, fl.src, DEFAULT_PKEY):
                a, b = b, a
            src, dst, pkey = a.guid, b.guid, fl.pkey
        out.append(Finding("default-partition-full", sev,
                           f"tenants {', '.join(names)} are all full members of the default partition 0x7fff, "
                           f"so they can reach each other (partitions.conf: restrict Default to "
                           f"'ALL=limited, SELF=full')" + ("; traffic between them was seen" if frames else ""),
                           sorted(frames)[:EVIDENCE_FRAMES], src=src, dst=dst, pkey=pkey))
        return out

    def _sm_findings(self, ports) -> list:
        out = []
        masters = {g for g, claims in self.wire.sm_claims.items() if any(s == "MASTER" for s, _ in claims)}
        sm_guid = ports.master_sm
        if len(masters) > 1:
            frames = sorted(f for g in masters for s, f in self.wire.sm_claims[g] if s == "MASTER")
            rogue = sorted(masters - {sm_guid})
            out.append(Finding("multiple-master-sm", "breach",
                               "more than one SM claims MASTER: " + ", ".join(self._who(g, ports) for g in sorted(masters)) +
                               (f"; the master SM of this subnet is {self._who(sm_guid, ports)}" if sm_guid else ""),
                               frames[:EVIDENCE_FRAMES], src=rogue[0] if len(rogue) == 1 else None))
        if sm_guid is None:
            return out                    # no SM known: nothing to compare a SubnSet's sender with
        sm_lid = ports.ports[sm_guid].lid if sm_guid in ports.ports else None
        refused = {(slid, _int(d.get("lidaddr")), _int(d.get("method")), _int(d.get("attributeid")))
                   for _, num, d, slid in self.traps if num == 256}
        by_sender = {}
        for number, sender, dlid, attr in self.smp_sets:
            by_sender.setdefault(sender, []).append((number, dlid, (dlid, sender, 0x02, attr) in refused))
        for sender, sets in by_sender.items():
            if sender is None:            # directed route from the permissive LID: the route's root port sent it
                guid, name = self._dr_root, "the directed-route root port"
                if guid is None or guid == sm_guid:
                    continue
            else:
                if sender == sm_lid:
                    continue
                who = ports.by_lid(sender)
                guid, name = (who[0].guid if len(who) == 1 else None), f"LID {sender}"
            targets = {d for _, d, _ in sets}
            dst = None
            if len(targets) == 1:
                owners = ports.by_lid(targets.pop())
                dst = owners[0].guid if len(owners) == 1 else None
            frames = [n for n, _, _ in sets]
            n_refused = sum(r for _, _, r in sets)
            out.append(Finding("smp-set-from-non-sm", "attempt" if n_refused == len(sets) else "breach",
                               f"{len(frames)} SubnSet SMP(s) from {name}" +
                               (f" ({self._who(guid, ports)})" if guid else "") +
                               (f" to {self._who(dst, ports)}" if dst else "") +
                               f", which is not the master SM {self._who(sm_guid, ports)}" +
                               (f"; {n_refused} refused by the target's M_Key (trap 256)" if n_refused else ""),
                               frames[:EVIDENCE_FRAMES], port=guid, src=guid, dst=dst))
        return out

    def _who(self, guid, ports) -> str:
        ps = ports.ports.get(guid)
        tenant = next((ep for ep in self.tenants.endpoints if ep.port_guid == guid), None)
        return f"port 0x{guid:016x}" + (f" LID {ps.lid}" if ps and ps.lid else "") + \
            (f" ({tenant.label} of tenant {tenant.tenant})" if tenant else "")

    def _trap_findings(self, ports) -> list:
        out = []
        for number, num, details, slid in self.traps:
            offender = ""
            l1, l2 = _int(details.get("lidaddr1")), _int(details.get("lidaddr2"))
            if num == 256 and details.get("lidaddr") is not None:      # the SMP sender and what it tried
                l1 = _int(details.get("lidaddr"))
                offender = (f"; offender LID {l1}: method 0x{_int(details.get('method')) or 0:02x} attribute "
                            f"0x{_int(details.get('attributeid')) or 0:04x} with M_Key "
                            f"0x{_int(details.get('mkey')) or 0:016x}")
                who = ports.by_lid(l1)
                if len(who) == 1:
                    offender += f" (port 0x{who[0].guid:016x}, {self._resolve(Side('ib', l1), ports).tenant})"
            elif l1 is not None or l2 is not None:
                offender = f"; offender LID {l1} -> LID {l2}"
                key = details.get("key")
                if key is not None:
                    offender += f", {'Q_Key' if num == 258 else 'P_Key'} 0x{_int(key) or 0:x}"
                qp1, qp2 = details.get("qp1"), details.get("qp2")
                if qp1 is not None:
                    offender += f", QP {qp1} -> {qp2}"
                who = ports.by_lid(l1) if l1 is not None else []
                if len(who) == 1:
                    t = self._resolve(Side("ib", l1), ports).tenant
                    offender += f" (port 0x{who[0].guid:016x}, {t})"
            issuer = ports.by_lid(slid) if slid is not None else []
            src = issuer[0].guid if len(issuer) == 1 else None
            out.append(Finding("trap", "attempt", f"trap {num} ({TRAPS[num]}) from LID {slid}" +
                               (f" ({self._who(src, ports)})" if src else "") + offender, [number],
                               src=src, trap=num, pkey=_int(details.get("key")) if num == 257 else None))
        return out

    def _join_findings(self, ports) -> list:
        out = []
        groups = self.policy.ipoib_mgids()
        groups.update({g.mgid: pk for pk, p in self.policy.partitions.items() for g in p.mgroups})
        for number, mgid, portgid, slid, tid in self.joins:
            if not mgid:
                continue
            raw = ipaddress.IPv6Address(mgid).packed
            ipoib = raw[2:4] in (b"\x40\x1b", b"\x60\x1b")       # IPoIB signature: the MGID carries the P_Key
            pk = groups.get(mgid)
            if pk is None and ipoib:
                pk = int.from_bytes(raw[4:6], "big") & 0x7FFF
            if pk is None:
                continue
            guid = gid_port_guid(portgid) if portgid else None
            if guid is None and slid is not None:
                who = ports.by_lid(slid)
                guid = who[0].guid if len(who) == 1 else None
            if guid is None:
                continue
            if pk not in self.policy.membership(self._node(guid, ports)):
                answer = self.sa_answers.get(tid)
                granted = answer is not None and answer[1] == 0
                verdict = ("the SA granted it" if granted else
                           f"the SA refused it (status 0x{answer[1]:04x})" if answer else "no SA answer in the capture")
                out.append(Finding("ipoib-join-foreign", "breach" if granted else "attempt",
                                   f"port 0x{guid:016x} joins IPoIB group {mgid} of partition 0x{pk:04x} "
                                   f"({self.policy.name_of(pk)}), which the policy does not give it; {verdict}",
                                   [number] + ([answer[0]] if answer else []), port=guid,
                                   pkey=int.from_bytes(raw[4:6], "big") if ipoib else pk))
        return out

    def _drift(self, ports) -> list:
        out = []
        for guid, ps in sorted(ports.ports.items()):
            table = ps.table()
            if table is None:
                continue
            want = self.policy.expected_table(self._node(guid, ports))
            extra, missing = sorted(table - want), sorted(want - table)
            if not extra and not missing:
                continue
            text = f"port 0x{guid:016x}" + (f" (LID {ps.lid})" if ps.lid else "") + \
                   (f" {ps.description}" if ps.description else "") + f": table from {ps.pkey_source}"
            if extra:
                text += "; not in policy: " + ", ".join(_pk(p) for p in extra)
            if missing:
                text += "; policy gives but table lacks: " + ", ".join(_pk(p) for p in missing)
            seen = self.table_frames.get(guid, [])
            frames = [n for n, keys in seen if keys & set(extra)] if extra else [n for n, _ in seen[-1:]]
            out.append(Finding("pkey-drift", "breach" if extra else "warning", text, frames[:EVIDENCE_FRAMES],
                               port=guid, pkey=extra[0] if len(extra) == 1 else None))
        return out


def _pk(p: int) -> str:
    return f"0x{p:04x} ({'full' if p & 0x8000 else 'limited'})"


def _dr_path(flat: dict) -> str:
    """The directed route as hex, InitialPath[0..HopCount] (IBA 14.2.2: entry 0 is unused, one byte a hop)."""
    raw = flat.get("smpdirected.initialpath")
    hops = _int(flat.get("smpdirected.hopcount"))
    if raw is None or hops is None:
        return ""
    raw = raw.hex() if isinstance(raw, (bytes, bytearray)) else str(raw)
    return raw[:2 * (hops + 1)]


def _as_list(v) -> list:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, str) and "," in v:
        return [int(x, 0) for x in v.split(",")]
    return [v]


def _ip_text(v) -> Optional[str]:
    if not v:
        return None
    try:
        a = ipaddress.ip_address(v)
        if a.version == 6 and a.ipv4_mapped:
            return str(a.ipv4_mapped)
        return str(a)
    except ValueError:
        return None


def _roce_match(ep: Endpoint, side: Side, with_vlan: bool) -> bool:
    if not ep.is_roce:
        return ep.gid is not None and side.ip is not None and _ip_text(ep.gid) == side.ip
    if ep.mac is not None and ep.mac != (side.mac or "").lower():
        return False
    if ep.net is not None:
        if side.ip is None:
            return False
        try:
            if ipaddress.ip_address(side.ip) not in ep.net:
                return False
        except (ValueError, TypeError):
            return False
    if with_vlan and ep.vlan is not None and ep.vlan != side.vlan:
        return False
    return True


def _can_talk(ma: dict, mb: dict) -> bool:
    """Two ports of different tenants may talk when they share a partition other than the default one in
    which at least one is a full member (IBA 10.9.2).  The default partition does not count: tenants that
    meet only there are the `Default=0x7fff : ALL=full` mistake, not a declared sharing."""
    return any(pk in mb and pk != DEFAULT_PKEY and ("limited" != ma[pk] or "limited" != mb[pk]) for pk in ma)


def _dedupe(findings: list) -> list:
    """Findings for the two directions of one conversation collapse into one (the first seen)."""
    seen, out = set(), []
    for f in findings:
        key = (f.rule, frozenset(f.tenants) if f.tenants else None, f.port,
               tuple(sorted(f.frames)) if f.frames else f.description)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    out.sort(key=lambda f: (-severity_rank(f.severity), f.rule, f.frames[:1]))
    return out


class Result:
    def __init__(self, audit: Audit):
        self.audit = audit
        self.findings: list = []
        self.matrix: dict = {}        # (src tenant, dst tenant) -> [packets, bytes, worst severity]
        self.ports: Optional[FabricState] = None

    def add_cell(self, a: str, b: str, packets: int, nbytes: int) -> None:
        cell = self.matrix.setdefault((a, b), [0, 0, None])
        cell[0] += packets
        cell[1] += nbytes

    def tenant_names(self) -> list:
        names = list(self.audit.tenants.names)
        if any(NO_TENANT in k for k in self.matrix):
            names.append(NO_TENANT)
        return names

    def cell(self, a: str, b: str):
        packets, nbytes, _ = self.matrix.get((a, b), [0, 0, None])
        worst = None
        for f in self.findings:
            if f.tenants and (f.tenants == (a, b)):
                if worst is None or severity_rank(f.severity) > severity_rank(worst):
                    worst = f.severity
        return packets, nbytes, worst

    def worst(self) -> Optional[str]:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)

    def verdict(self, fail_on: str) -> str:
        w = self.worst()
        if w is not None and severity_rank(w) >= severity_rank(fail_on):
            return "FAIL"
        return "PASS"
