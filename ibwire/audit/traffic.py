"""Data packets folded into flows, and the rules on them (IBA 10.9: partitioning, limited and full members).

A pairwise finding is an attempt, or a breach when the target answers (any packet from the destination
back to the source in the same P_Key), and is told from its initiator's side: who sent first in that
partition, multicast included.
  pkey-not-shared        data packet whose P_Key is not a policy partition of both ends  [attempt/breach]
  limited-limited        both ends only limited members of the packet's partition       [attempt/breach]
  cross-tenant-attempt   traffic between tenants sharing no usable partition (the default one does not
                         count: meeting only there is the ALL=full mistake), unanswered  [attempt]
  cross-tenant-breach    the same, answered by the target                                [breach]
  roce-vlan-crossing     RoCE traffic between tenants (separated by VLAN / IP subnet)    [attempt/breach]
  undeclared-pkey        a P_Key on the wire that partitions.conf does not declare       [warning]
  default-partition-full two tenants are both full members of the default partition    [warning/breach]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissectors.numbers import DEFAULT_PKEY_BASE, PKEY_BASE
from ibwire.audit.fields import as_int
from ibwire.audit.findings import EVIDENCE_FRAMES, Finding
from ibwire.audit.identity import NO_TENANT, Identities, Side, sides
from ibwire.audit.policy import Policy
from ibwire.audit.tenants import Tenants
from ibwire.words import plural


@dataclass
class Flow:
    src: Side
    dst: Side
    pkey: int
    packets: int = 0
    bytes: int = 0
    frames: list = field(default_factory=list)


class Traffic:
    """Per-(source, destination, P_Key) flows with counts, bytes and their first evidence frames."""

    def __init__(self):
        self.flows: dict = {}  # (src Side key, dst Side key, P_Key) -> Flow
        self.first_seen: dict = {}  # (Side speaker, P_Key base) -> first frame sent, unicast or multicast
        self._ends: dict = {}  # bulk reader's address tuple -> (src, dst, their keys, speaker)

    def add(self, number: int, flat: dict, length: int) -> None:
        """One data packet."""
        self.add_group([number], flat, 1, length)

    def add_group(self, frames: list, flat: dict, packets: int, nbytes: int) -> None:
        """`packets` data packets with the same ends and P_Key, `frames` the first of their frame numbers;
        `flat["_addr"]`, when the bulk reader sets it, names their address fields, so their Sides are
        built once per address pair."""
        addr = flat.get("_addr")
        ends = self._ends.get(addr) if addr is not None else None
        if ends is None:
            src, dst = sides(flat)
            ends = (src, dst, src.key(), dst.key(), src.speaker())
            if addr is not None:
                self._ends[addr] = ends
        src, dst, skey, dkey, speaker = ends
        pkey = as_int(flat.get("bth.p_key")) or 0
        self.first_seen.setdefault((speaker, pkey & PKEY_BASE), frames[0])
        key = (skey, dkey, pkey)
        fl = self.flows.get(key)
        if fl is None:
            fl = self.flows[key] = Flow(src, dst, pkey)
        fl.packets += packets
        fl.bytes += nbytes
        if len(fl.frames) < EVIDENCE_FRAMES:
            fl.frames += frames[: EVIDENCE_FRAMES - len(fl.frames)]

    def conversation(self, fl: Flow) -> tuple:
        """(initiator's flow, the answer or None, swapped): one conversation told from its initiator's side."""
        back = self.flows.get((fl.dst.key(), fl.src.key(), fl.pkey))
        if back is not None and self._spoke_first(back.src, fl.src, fl.pkey & PKEY_BASE):
            return back, fl, True
        return fl, back, False

    def _spoke_first(self, x: Side, y: Side, base: int) -> bool:
        """Did x send in this partition (to anyone, multicast included) before y did?"""
        inf = float("inf")
        return self.first_seen.get((x.speaker(), base), inf) < self.first_seen.get((y.speaker(), base), inf)


def flow_findings(traffic: Traffic, policy: Policy, ids: Identities) -> list:
    """pkey-not-shared, limited-limited, cross-tenant-*, roce-vlan-crossing, then undeclared-pkey."""
    findings = []
    undeclared = {}
    crossing: dict = {}  # RoCE between tenants: (tenant, IP, tenant, IP, VLAN) one way -> its flows
    for fl in traffic.flows.values():
        fl, back, _ = traffic.conversation(fl)
        a, b = ids.resolve(fl.src), ids.resolve(fl.dst)
        answered = back is not None
        base = fl.pkey & PKEY_BASE
        pair = (a.tenant, b.tenant)
        if fl.src.kind == "ib" and not policy.declared(base):
            seen = undeclared.setdefault(base, ([], set()))
            seen[0].extend(fl.frames)
            seen[1].add(fl.pkey)
        if fl.src.kind == "roce":
            if a.tenant != b.tenant and NO_TENANT not in pair:
                for f in (fl, back) if back is not None else (fl,):
                    ends = (ids.resolve(f.src).tenant, f.src.ip, ids.resolve(f.dst).tenant, f.dst.ip, f.src.vlan)
                    crossing.setdefault(ends, {})[(f.src.key(), f.dst.key())] = f
            continue
        if a.guid is None or b.guid is None or not policy.declared(base):
            continue
        ma = policy.membership(ids.node(a.guid))
        mb = policy.membership(ids.node(b.guid))
        if base not in ma or base not in mb:
            missing = " and ".join(f"0x{g:016x}" for g, m in ((a.guid, ma), (b.guid, mb)) if base not in m)
            findings.append(
                _pairwise(
                    "pkey-not-shared",
                    fl,
                    back,
                    (a, b),
                    f"P_Key 0x{fl.pkey:04x} ({policy.name_of(base)}) from {fl.src.text()} to "
                    f"{fl.dst.text()}: the policy does not give it to port {missing}",
                )
            )
        elif ma[base] == "limited" and mb[base] == "limited":
            findings.append(
                _pairwise(
                    "limited-limited",
                    fl,
                    back,
                    (a, b),
                    f"P_Key 0x{fl.pkey:04x} ({policy.name_of(base)}) between two limited "
                    f"members {fl.src.text()} -> {fl.dst.text()}"
                    + ("; the target answered, so enforcement is off" if answered else ""),
                )
            )
        if a.tenant != b.tenant and NO_TENANT not in pair and not _can_talk(ma, mb):
            rule = "cross-tenant-breach" if answered else "cross-tenant-attempt"
            via = " (they meet only in the default partition)" if base == DEFAULT_PKEY_BASE else ""
            findings.append(
                _pairwise(
                    rule,
                    fl,
                    back,
                    (a, b),
                    f"tenant {a.tenant} ({fl.src.text()}) -> tenant {b.tenant} ({fl.dst.text()}) "
                    f"share no tenant partition{via}, P_Key 0x{fl.pkey:04x}",
                )
            )
    findings += _crossings(crossing, ids)
    for base, (frames, wire) in sorted(undeclared.items()):
        keys = ", ".join(f"0x{k:04x}" for k in sorted(wire))
        findings.append(
            Finding(
                "undeclared-pkey",
                "warning",
                f"P_Key {keys} is on the wire but partitions.conf declares no partition 0x{base:04x}",
                sorted(set(frames))[:EVIDENCE_FRAMES],
                pkey=min(wire) if len(wire) == 1 else base,
            )
        )
    return findings


def default_full_findings(traffic: Traffic, policy: Policy, tenants: Tenants, ids: Identities) -> list:
    """default-partition-full: a warning, a breach once traffic between those tenants is seen there."""
    by_tenant = {}
    for ep in tenants.endpoints:
        if ep.port_guid is not None:
            m = policy.membership(ids.node(ep.port_guid)).get(DEFAULT_PKEY_BASE)
            if m in ("full", "both"):
                by_tenant.setdefault(ep.tenant, []).append(ep)
    names = sorted(by_tenant)
    if len(names) < 2:
        return []
    frames, sev, talkers, first = [], "warning", set(), None
    default_flows = [
        fl for fl in traffic.flows.values() if fl.src.kind == "ib" and fl.pkey & PKEY_BASE == DEFAULT_PKEY_BASE
    ]
    for fl in default_flows:
        a, b = ids.resolve(fl.src), ids.resolve(fl.dst)
        if a.tenant != b.tenant and a.tenant in by_tenant and b.tenant in by_tenant:
            frames += fl.frames
            talkers.add(fl.src.speaker())
            sev = "breach"
            if first is None or fl.frames[0] < first[0]:
                first = (fl.frames[0], a, b, fl)
    for fl in default_flows:  # their broadcasts (IPoIB ARP) reached every other tenant too
        if fl.src.speaker() in talkers and ids.resolve(fl.dst).how == "multicast group":
            frames += fl.frames
    src = dst = pkey = None
    if first is not None:
        _, a, b, fl = first
        if traffic.conversation(fl)[2]:
            a, b = b, a
        src, dst, pkey = a.guid, b.guid, fl.pkey
    return [
        Finding(
            "default-partition-full",
            sev,
            f"tenants {', '.join(names)} are all full members of the default partition 0x7fff, "
            f"so they can reach each other (partitions.conf: restrict Default to "
            f"'ALL=limited, SELF=full')" + ("; traffic between them was seen" if frames else ""),
            sorted(frames)[:EVIDENCE_FRAMES],
            src=src,
            dst=dst,
            pkey=pkey,
        )
    ]


def _crossings(crossing: dict, ids: Identities) -> list:
    """One roce-vlan-crossing finding per pair of tenant addresses (IP and VLAN), however many MACs the wire
    shows for them (a mirror may rewrite them frame by frame): told from the side that sent first, answered
    when the other side sent back."""
    findings, done = [], set()
    for ends, flows in crossing.items():
        rev = (ends[2], ends[3], ends[0], ends[1], ends[4])
        if ends in done:
            continue
        done.update((ends, rev))
        one, other = _merged(flows.values()), _merged(crossing.get(rev, {}).values())
        if other is not None and other.frames[:1] < one.frames[:1]:
            one, other = other, one
        a, b = ids.resolve(one.src), ids.resolve(one.dst)
        findings.append(
            _pairwise(
                "roce-vlan-crossing",
                one,
                other,
                (a, b),
                f"RoCE traffic from tenant {a.tenant} ({one.src.text()}) to tenant {b.tenant} ({one.dst.text()})",
            )
        )
    return findings


def _merged(flows) -> "Flow | None":
    """Flows between the same two addresses as one; a MAC that varies among them is left out."""
    flows = sorted(flows, key=lambda f: f.frames[:1])
    if not flows:
        return None
    f0 = flows[0]

    def side(attr):
        s = getattr(f0, attr)
        return s if all(getattr(f, attr).mac == s.mac for f in flows) else Side(s.kind, mac=None, ip=s.ip, vlan=s.vlan)

    frames = sorted(fr for f in flows for fr in f.frames)[:EVIDENCE_FRAMES]
    return Flow(side("src"), side("dst"), f0.pkey, sum(f.packets for f in flows), sum(f.bytes for f in flows), frames)


def _pairwise(rule, fl, back, ends, text) -> Finding:
    a, b = ends
    frames = fl.frames + (back.frames if back else [])
    sev = "breach" if back is not None else "attempt"
    text += f" ({plural(fl.packets, 'packet')}" + (f", {back.packets} answered back)" if back else ", none answered)")
    return Finding(
        rule,
        sev,
        text,
        sorted(frames)[:EVIDENCE_FRAMES],
        (a.tenant, b.tenant),
        src=a.guid,
        dst=b.guid,
        pkey=fl.pkey,
        ends=(fl.src, fl.dst),
    )


def _can_talk(ma: dict, mb: dict) -> bool:
    """Two ports of different tenants may talk when they share a partition other than the default one in
    which at least one is a full member (IBA 10.9.2).  The default partition does not count: tenants that
    meet only there are the `Default=0x7fff : ALL=full` mistake, not a declared sharing."""
    return any(pk in mb and pk != DEFAULT_PKEY_BASE and ("limited" != ma[pk] or "limited" != mb[pk]) for pk in ma)
