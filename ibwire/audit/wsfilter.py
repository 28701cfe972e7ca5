"""Wireshark display filters that reproduce a finding (field names of Wireshark 4.0's InfiniBand dissector).

Each finding gets three: `frames` (its evidence frames by number in the audited capture), `evidence` (the
same frames in the file `ibwire audit --evidence` writes, by their pcapng comment) and `semantic` (what
the rule looks at: P_Key and ends of a flow, the port's P_KeyTable answers, SubnSet senders, MASTER
claims, traps, joins, IsSM).  A semantic filter selects every evidence frame, and may select more
(packets past the evidence cap, the same conversation later).
"""

from __future__ import annotations

from typing import Optional

from ibwire.audit.findings import Finding
from ibwire.audit.identity import Identities, Side

FLOW_RULES = ("pkey-not-shared", "limited-limited", "cross-tenant-breach", "cross-tenant-attempt", "roce-vlan-crossing")
TRAP_NUMBERS = {256, 257, 258, 259}


def evidence_comment(number: int, f: Finding) -> str:
    """The pcapng comment of an evidence frame: finding number, rule and severity first."""
    return f"ibwire finding {number}: {f.rule} {f.severity}: {f.description}"


def filters(number: int, f: Finding, ids: Identities) -> dict:
    frames = sorted(set(f.frames))
    return {
        "frames": f"frame.number in {{{', '.join(map(str, frames))}}}" if frames else "",
        "evidence": f'frame.comment contains "ibwire finding {number}: "' if frames else "",
        "semantic": semantic(f, ids) or "",
    }


def _pkeys(pkey: Optional[int]) -> str:
    return "" if pkey is None else f"infiniband.bth.p_key == 0x{pkey:04x}"


def _partition(base: int) -> str:
    base &= 0x7FFF
    return f"infiniband.bth.p_key in {{0x{base:04x}, 0x{base | 0x8000:04x}}}"


def _lid(ids: Identities, guid: Optional[int]) -> Optional[int]:
    ps = ids.ports.ports.get(guid) if guid is not None else None
    return ps.lid if ps else None


def _side(side: Side, to: bool) -> str:
    d = "dst" if to else "src"
    if side.kind == "ib":
        if side.gid and not side.gid.startswith("ff"):
            return f"infiniband.grh.{'dgid' if to else 'sgid'} == {side.gid}"
        return f"infiniband.lrh.{'dlid' if to else 'slid'} == {side.lid}" if side.lid is not None else ""
    parts = []
    if side.ip:
        parts.append(f"{'ipv6' if ':' in side.ip else 'ip'}.{d} == {side.ip}")
    elif side.mac:
        parts.append(f"eth.{d} == {side.mac}")
    return " && ".join(parts)


def _both_ways(a: str, b: str, a_to: str, b_to: str) -> str:
    if not (a and b_to) or not (b and a_to):
        return ""
    return f"(({a} && {b_to}) || ({b} && {a_to}))"


def _flow(f: Finding, ids: Identities) -> str:
    if f.ends:
        src, dst = f.ends
        ends = _both_ways(_side(src, False), _side(dst, False), _side(src, True), _side(dst, True))
        vlan = f"vlan.id == {src.vlan}" if src.kind == "roce" and src.vlan is not None else ""
    else:
        a, b = _lid(ids, f.src), _lid(ids, f.dst)
        ends = (
            (
                f"((infiniband.lrh.slid == {a} && infiniband.lrh.dlid == {b}) || "
                f"(infiniband.lrh.slid == {b} && infiniband.lrh.dlid == {a}))"
            )
            if a and b
            else ""
        )
        vlan = ""
    return " && ".join(x for x in (_pkeys(f.pkey), ends, vlan) if x)


def semantic(f: Finding, ids: Identities) -> str:
    r = f.rule
    if r == "default-partition-full":  # tenants' ports sending in the default partition
        lids = sorted({lid for ep in ids.tenants.endpoints for lid in [_lid(ids, ep.port_guid)] if lid})
        return _partition(0x7FFF) + (f" && infiniband.lrh.slid in {{{', '.join(map(str, lids))}}}" if lids else "")
    if r in FLOW_RULES:
        return _flow(f, ids)
    if r == "undeclared-pkey":
        return _partition(f.pkey) if f.pkey is not None else ""
    if r == "pkey-drift":
        lid = _lid(ids, f.port)
        base = "infiniband.mad.attributeid == 0x0016 && infiniband.mad.method == 0x81"
        where = f" && (infiniband.lrh.slid == {lid} || infiniband.mad.mgmtclass == 0x81)" if lid else ""
        what = f" && infiniband.p_keytable.p_keybase == 0x{f.pkey & 0x7FFF:04x}" if f.pkey is not None else ""
        return base + where + what
    if r == "smp-set-from-non-sm":
        lid = _lid(ids, f.src)
        sets = "infiniband.mad.mgmtclass in {0x01, 0x81} && infiniband.mad.method == 0x02"
        if lid:
            return sets + f" && (infiniband.lrh.slid == {lid} || infiniband.smpdirected.drslid == {lid})"
        return sets + " && infiniband.lrh.slid == 0xffff"
    if r == "multiple-master-sm":
        return "infiniband.sminfo.smstate == 3"
    if r == "trap" and f.trap in TRAP_NUMBERS:
        lid = _lid(ids, f.src)
        return f"infiniband.notice.trapnumberdeviceid == {f.trap}" + (
            f" && infiniband.lrh.slid == {lid}" if lid else ""
        )
    if r == "ipoib-join-foreign":
        join = "infiniband.mad.attributeid == 0x0038"
        return join + (f" && infiniband.mcmemberrecord.mgid == {f.mgid}" if f.mgid else "")
    if r == "sm-capable-port":
        lid = _lid(ids, f.port)
        if lid is None:
            return "infiniband.portinfo.capabilitymask.issm == 1"
        return (
            f"(infiniband.portinfo.capabilitymask.issm == 1 && infiniband.portinfo.lid == {lid}) || "
            f"(infiniband.notice.trapnumberdeviceid == 144 && infiniband.trap.lidaddr == {lid} && "
            f"infiniband.trap.capabilitymask & 0x00000002)"
        )
    if r == "policy-fallback":
        return _pkeys(0xFFFF)
    if r == "policy-reading" and f.pkey is not None:
        lid = _lid(ids, f.port)
        return _partition(f.pkey) + (
            f" && (infiniband.lrh.slid == {lid} || infiniband.lrh.dlid == {lid})" if lid else ""
        )
    return ""
