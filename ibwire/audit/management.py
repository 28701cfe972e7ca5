"""Rules on management traffic: who may program the subnet, what the SMs and traps say, who joins which group.
smp-set-from-non-sm  SubnSet from any LID other than the master SM's (directed route from the permissive
                     LID: from the route's root port, the one answering its requester's NodeInfo over the
                     empty path) [breach];
                     [attempt] when every such Set was refused: its target sent trap 256 (bad M_Key) naming
                     the sender's LID, method and attribute (IBA 13.5.3, 14.2.5.1)
multiple-master-sm   more than one port claims SMState MASTER; the master is the claim winning the election
                     (highest priority, then lowest GUID: 14.4.1.2, analyze/fabric/sm.py), the others are rogues [breach]
sm-capable-port      a port other than the master SM's sets PortInfo:CapabilityMask.IsSM (14.2.5.6; in a
                     GetResp or trap 144): it claims to host an SM [attempt on a tenant's port, else warning]
trap                 P_Key / Q_Key / M_Key violation trap 256-259 sent to the SM, offender decoded
                     (14.2.5.1 / Table 118)                                                              [attempt]
ipoib-join-foreign   MCMemberRecord join to the IPoIB group of a partition the port is not in (15.2.5.17):
                     granted by the SA (SubnAdmGetResp status 0) [breach], refused or unanswered [attempt]
"""

from __future__ import annotations

import ipaddress

from dissectors.numbers import PKEY_BASE
from ibwire.audit.fields import as_int
from ibwire.audit.findings import EVIDENCE_FRAMES, Finding
from ibwire.audit.identity import Identities, Side
from ibwire.audit.mads import TRAPS, MadObserver
from ibwire.audit.policy import Policy
from ibwire.audit.state import gid_port_guid


def sm_findings(mads: MadObserver, ids: Identities) -> list:
    """multiple-master-sm, then smp-set-from-non-sm per sender."""
    out = []
    ports = ids.ports
    masters = {g for g, claims in mads.wire.sm_claims.items() if any(s == "MASTER" for s, _ in claims)}
    sm_guid = ports.master_sm
    if len(masters) > 1:
        frames = sorted(f for g in masters for s, f in mads.wire.sm_claims[g] if s == "MASTER")
        rogue = sorted(masters - {sm_guid})
        out.append(
            Finding(
                "multiple-master-sm",
                "breach",
                "more than one SM claims MASTER: "
                + ", ".join(ids.who(g) for g in sorted(masters))
                + (f"; the master SM of this subnet is {ids.who(sm_guid)}" if sm_guid else ""),
                frames[:EVIDENCE_FRAMES],
                src=rogue[0] if len(rogue) == 1 else None,
            )
        )
    out += _is_sm_findings(mads, ids, sm_guid)
    if sm_guid is None:
        return out  # no SM known: nothing to compare a SubnSet's sender with
    sm_lid = ports.ports[sm_guid].lid if sm_guid in ports.ports else None
    refused = {
        (slid, as_int(d.get("lidaddr")), as_int(d.get("method")), as_int(d.get("attributeid")))
        for _, num, d, slid in mads.traps
        if num == 256
    }
    by_sender = {}
    for number, sender, dlid, attr in mads.smp_sets:
        by_sender.setdefault(sender, []).append((number, dlid, (dlid, sender, 0x02, attr) in refused))
    for sender, sets in by_sender.items():
        if isinstance(sender, tuple):  # directed route from the permissive LID: its requester's own port sent it
            guid, name = mads.dr_roots.get(sender[1]), "the directed-route root port"
            if guid is None or guid == sm_guid:
                continue
        else:
            if sender == sm_lid:
                continue
            guid, name = ids.port_at(sender), f"LID {sender}"
        targets = {d for _, d, _ in sets}
        dst = ids.port_at(targets.pop()) if len(targets) == 1 else None
        frames = [n for n, _, _ in sets]
        n_refused = sum(r for _, _, r in sets)
        out.append(
            Finding(
                "smp-set-from-non-sm",
                "attempt" if n_refused == len(sets) else "breach",
                f"{len(frames)} SubnSet SMP(s) from {name}"
                + (f" ({ids.who(guid)})" if guid else "")
                + (f" to {ids.who(dst)}" if dst else "")
                + f", which is not the master SM {ids.who(sm_guid)}"
                + (f"; {n_refused} refused by the target's M_Key (trap 256)" if n_refused else ""),
                frames[:EVIDENCE_FRAMES],
                port=guid,
                src=guid,
                dst=dst,
            )
        )
    return out


def _is_sm_findings(mads: MadObserver, ids: Identities, sm_guid) -> list:
    claims: dict = {}
    for frame, guid, lid in mads.is_sm:
        guid = guid if guid is not None else ids.port_at(lid) if lid is not None else None
        if guid is not None and guid != sm_guid:
            claims.setdefault(guid, []).append(frame)
    out = []
    for guid, frames in sorted(claims.items()):
        ep = ids.tenants.endpoint_of(guid)
        out.append(
            Finding(
                "sm-capable-port",
                "attempt" if ep else "warning",
                f"{ids.who(guid)} sets CapabilityMask.IsSM: it claims to host a subnet manager"
                + (f", but the master SM is {ids.who(sm_guid)}" if sm_guid else "")
                + ("; a tenant's port has no business running an SM" if ep else ""),
                sorted(frames)[:EVIDENCE_FRAMES],
                port=guid,
                src=guid,
            )
        )
    return out


def trap_findings(mads: MadObserver, ids: Identities) -> list:
    out = []
    for number, num, details, slid in mads.traps:
        offender = ""
        l1, l2 = as_int(details.get("lidaddr1")), as_int(details.get("lidaddr2"))
        if num == 256 and details.get("lidaddr") is not None:  # the SMP sender and what it tried
            l1 = as_int(details.get("lidaddr"))
            offender = (
                f"; offender LID {l1}: method 0x{as_int(details.get('method')) or 0:02x} attribute "
                f"0x{as_int(details.get('attributeid')) or 0:04x} with M_Key "
                f"0x{as_int(details.get('mkey')) or 0:016x}"
            )
            offender += _offender_port(ids, l1)
        elif l1 is not None or l2 is not None:
            offender = f"; offender LID {l1} -> LID {l2}"
            key = details.get("key")
            if key is not None:
                offender += f", {'Q_Key' if num == 258 else 'P_Key'} 0x{as_int(key) or 0:x}"
            qp1, qp2 = details.get("qp1"), details.get("qp2")
            if qp1 is not None:
                offender += f", QP {qp1} -> {qp2}"
            if l1 is not None:
                offender += _offender_port(ids, l1)
        src = ids.port_at(slid) if slid is not None else None
        out.append(
            Finding(
                "trap",
                "attempt",
                f"trap {num} ({TRAPS[num]}) from LID {slid}" + (f" ({ids.who(src)})" if src else "") + offender,
                [number],
                src=src,
                trap=num,
                pkey=as_int(details.get("key")) if num == 257 else None,
            )
        )
    return out


def _offender_port(ids: Identities, lid) -> str:
    """' (port GUID, tenant)' of the one port holding the offending LID, '' when none or several do."""
    guid = ids.port_at(lid)
    return f" (port 0x{guid:016x}, {ids.resolve(Side('ib', lid)).tenant})" if guid is not None else ""


def join_findings(mads: MadObserver, policy: Policy, ids: Identities) -> list:
    out = []
    groups = policy.ipoib_mgids()
    groups.update({g.mgid: pk for pk, p in policy.partitions.items() for g in p.mgroups})
    for number, mgid, portgid, slid, tid in mads.joins:
        if not mgid:
            continue
        raw = ipaddress.IPv6Address(mgid).packed
        ipoib = raw[2:4] in (b"\x40\x1b", b"\x60\x1b")  # IPoIB signature: the MGID carries the P_Key
        pk = groups.get(mgid)
        if pk is None and ipoib:
            pk = int.from_bytes(raw[4:6], "big") & PKEY_BASE
        if pk is None:
            continue
        guid = gid_port_guid(portgid) if portgid else None
        if guid is None and slid is not None:
            guid = ids.port_at(slid)
        if guid is None:
            continue
        if pk not in policy.membership(ids.node(guid)):
            answer = mads.sa_answers.get(tid)
            granted = answer is not None and answer[1] == 0
            verdict = (
                "the SA granted it"
                if granted
                else f"the SA refused it (status 0x{answer[1]:04x})"
                if answer
                else "no SA answer in the capture"
            )
            out.append(
                Finding(
                    "ipoib-join-foreign",
                    "breach" if granted else "attempt",
                    f"port 0x{guid:016x} joins IPoIB group {mgid} of partition 0x{pk:04x} "
                    f"({policy.name_of(pk)}), which the policy does not give it; {verdict}",
                    [number] + ([answer[0]] if answer else []),
                    port=guid,
                    mgid=mgid,
                    pkey=int.from_bytes(raw[4:6], "big") if ipoib else pk,
                )
            )
    return out
