"""Fabric management traffic: the SM sweep, SMP faults, P_Key table read-back, IPoIB joins, ARP and ICMP.

SM sweep as opensm performs it (opensm osm_state_mgr.c order): SMInfo on its own port, directed-route
NodeInfo and PortInfo Get to every node, PortInfo Set assigning LIDs (and the SM LID, and the M_Key of a
port that has one), then P_KeyTable Set of each CA port's partition table (IBA §14.4).  A SubnSet whose
M_Key differs from the target's is dropped and reported with trap 256 (IBA §14.2.4.1, M_KeyProtectBits 1).
IPoIB joins are SubnAdmSet(MCMemberRecord) to the SA, which grants them only to a port whose P_Key table
(as the SM last read it) holds the group's P_Key, else answers ERR_REQ_INVALID (as opensm's osm_sa_mcmember_record.c).  IPoIB over UD per RFC 4391/4392: a 4-byte encapsulation
header (ethertype, reserved), ARP with 20-byte IB hardware addresses (flags+QPN, GID), broadcast group
MGID ff12:401b:<P_Key>::ffff:ffff, Q_Key 0x00000B1B.
"""

import struct
from typing import List, Tuple

from dissectors.numbers import ETHERTYPE_IPV4, IPOIB_QKEY
from ibwire.synth import mads
from ibwire.synth.engine import MCAST_QPN, Context

_ICMP_ID = 0x1D2

Timed = List[Tuple[float, bytes]]


def sm_sweep(ctx: Context, t0: float) -> Timed:
    s, sm, out = ctx.s, ctx.sm, []
    if sm is None or not s.sweep or not ctx.link.native:
        return out
    t = t0
    tid = ctx.tid
    has_switch = any(p.kind == "switch" for p in s.ports.values())

    def pair(src, dst, req, resp, qp=0, directed=False):
        nonlocal t
        out.append((t, ctx.mad(src, dst, req, qp, directed=directed)))
        out.append((t + 1.5e-6, ctx.mad(dst, src, resp, qp, directed=directed)))
        t += 4e-6

    i = next(tid)
    pair(
        sm,
        sm,
        mads.smp(mads.GET, mads.ATTR_SM_INFO, i, directed=True, hops=0),
        mads.smp(
            mads.GET_RESP, mads.ATTR_SM_INFO, i, mads.sm_info(sm.guid, 3, 14), directed=True, hops=0, response=True
        ),
        directed=True,
    )
    order = [p for p in s.ports.values() if p.kind == "switch"] + [p for p in s.ports.values() if p.kind != "switch"]
    # every CA hangs off its own leaf port (1, 2, ... in declaration order): its route is SM port 1, leaf port
    leaf_port = {p.name: n for n, p in enumerate((p for p in order if p.kind != "switch"), 1)}
    for p in order:
        hops = 0 if p is sm else 1 if (p.kind == "switch" or not has_switch) else 2
        route = [1, leaf_port[p.name]][:hops] if hops == 2 else None
        ntype, nports = (2, 36) if p.kind == "switch" else (1, 1)
        node_guid = p.guid - 1 if p.kind != "switch" else p.guid
        dr = dict(directed=True, hops=hops, route=route)
        i = next(tid)
        pair(
            sm,
            p,
            mads.smp(mads.GET, mads.ATTR_NODE_INFO, i, **dr),
            mads.smp(
                mads.GET_RESP,
                mads.ATTR_NODE_INFO,
                i,
                mads.node_info(ntype, nports, node_guid, node_guid, p.guid, vendor_id=0x0002C9),
                response=True,
                **dr,
            ),
            directed=True,
        )
        i = next(tid)
        pair(
            sm,
            p,
            mads.smp(mads.GET, mads.ATTR_PORT_INFO, i, attr_mod=0 if p.kind == "switch" else 1, **dr),
            mads.smp(mads.GET_RESP, mads.ATTR_PORT_INFO, i, mads.port_info(0, 0, state=2), response=True, **dr),
            directed=True,
        )
        i = next(tid)
        pi = mads.port_info(p.lid, sm.lid, state=4, mkey=p.mkey, mkey_protect=1 if p.mkey else 0)
        pair(
            sm,
            p,
            mads.smp(mads.SET, mads.ATTR_PORT_INFO, i, pi, **dr),
            mads.smp(mads.GET_RESP, mads.ATTR_PORT_INFO, i, pi, response=True, **dr),
            directed=True,
        )
    for p in order:
        if p.kind == "switch":
            continue
        table = mads.pkey_table(s.policy_pkeys(p.name))
        i = next(tid)
        pair(
            sm,
            p,
            mads.smp(mads.SET, mads.ATTR_PKEY_TABLE, i, table, mkey=p.mkey),
            mads.smp(mads.GET_RESP, mads.ATTR_PKEY_TABLE, i, table, mkey=p.mkey),
        )
    return out


def smp_faults(ctx: Context, t0: float) -> Timed:
    """SMPs from the wrong place: a Set from a non-SM port, a second SM claiming master, drifted tables."""
    s, out = ctx.s, []
    if not ctx.link.native:
        return out
    for f in s.faults:
        a = f.args
        t = t0 + float(a.get("at_us", 0.0)) * 1e-6
        if f.kind == "smp_set":
            src, dst = s.ports[a["port"]], s.ports[a["target"]]
            i = next(ctx.tid)
            if a.get("attribute", "P_KeyTable") == "PortInfo":
                data, attr = mads.port_info(dst.lid, src.lid), mads.ATTR_PORT_INFO
            else:
                keys = [int(k, 0) if isinstance(k, str) else k for k in a.get("pkeys", ["0xffff"])]
                data, attr = mads.pkey_table(keys), mads.ATTR_PKEY_TABLE
            mkey = a.get("mkey", 0)
            out.append((t, ctx.mad(src, dst, mads.smp(mads.SET, attr, i, data, mkey=mkey), 0)))
            if dst.mkey and mkey != dst.mkey:  # protected: dropped, trap 256 names the offender
                ctx.send_trap(out, t + 1e-6, dst, mads.notice_bad_mkey(dst.lid, src.lid, mads.SET, attr, 0, mkey))
            else:
                out.append((t + 1.5e-6, ctx.mad(dst, src, mads.smp(mads.GET_RESP, attr, i, data, mkey=mkey), 0)))
        elif f.kind == "rogue_sm" and ctx.sm is not None:  # an opensm left at priority 0 claiming MASTER:
            rogue = s.ports[a["port"]]  # it loses to the SM's 14 (IBA 14.4.1.2)
            i = next(ctx.tid)
            out.append((t, ctx.mad(ctx.sm, rogue, mads.smp(mads.GET, mads.ATTR_SM_INFO, i), 0)))
            out.append(
                (
                    t + 1.5e-6,
                    ctx.mad(
                        rogue, ctx.sm, mads.smp(mads.GET_RESP, mads.ATTR_SM_INFO, i, mads.sm_info(rogue.guid, 3, 0)), 0
                    ),
                )
            )
        elif f.kind == "pkey_drift" and ctx.sm is not None:
            p = s.ports[a["port"]]
            i = next(ctx.tid)
            out.append((t, ctx.mad(ctx.sm, p, mads.smp(mads.GET, mads.ATTR_PKEY_TABLE, i), 0)))
            out.append(
                (
                    t + 1.5e-6,
                    ctx.mad(
                        p,
                        ctx.sm,
                        mads.smp(mads.GET_RESP, mads.ATTR_PKEY_TABLE, i, mads.pkey_table(ctx.tables[p.name])),
                        0,
                    ),
                )
            )
    return out


def ipoib_joins(ctx: Context, t0: float) -> Timed:
    """`ipoib_join` faults: a port joins a partition's IPoIB broadcast group; the SA grants or refuses it."""
    s, out = ctx.s, []
    if not ctx.link.native or ctx.sm is None:
        return out
    for f in s.faults:
        if f.kind != "ipoib_join":
            continue
        port, part = s.ports[f.args["port"]], s.partitions[f.args["partition"]]
        t = t0 + float(f.args.get("at_us", 0.0)) * 1e-6
        pkey = part.pkey | 0x8000
        i = next(ctx.tid)
        req = mads.mc_member_record(part.mgid, port.gid, pkey)
        out.append(
            (t, ctx.mad(port, ctx.sm, mads.sa(mads.SET, mads.ATTR_MC_MEMBER_RECORD, i, req, mads.MCR_MASK_JOIN), 1))
        )
        if _own_pkey(ctx, port, part.pkey) is not None:
            resp = mads.sa(
                mads.GET_RESP,
                mads.ATTR_MC_MEMBER_RECORD,
                i,
                mads.mc_member_record(part.mgid, port.gid, pkey, mlid=part.mlid),
                mads.MCR_MASK_JOIN,
            )
        else:
            resp = mads.sa(
                mads.GET_RESP, mads.ATTR_MC_MEMBER_RECORD, i, req, mads.MCR_MASK_JOIN, status=mads.SA_STATUS_REQ_INVALID
            )
        out.append((t + 3e-6, ctx.mad(ctx.sm, port, resp, 1)))
    return out


def _own_pkey(ctx: Context, port, base: int):
    keys = [k for k in ctx.tables[port.name] if k & 0x7FFF == base]
    return max(keys) if keys else None


def _hwaddr(port) -> bytes:
    return struct.pack(">I", 0x80000000 | port.ipoib_qpn) + port.gid


def _ip4(src: bytes, dst: bytes, proto: int, payload: bytes, ident: int) -> bytes:
    h = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0x4000, 64, proto, 0, src, dst)
    c = sum(struct.unpack(">10H", h))
    c = (c & 0xFFFF) + (c >> 16)
    c = ~((c & 0xFFFF) + (c >> 16)) & 0xFFFF
    return h[:10] + struct.pack(">H", c) + h[12:] + payload


def _icmp(kind: int, ident: int, seqno: int) -> bytes:
    data = bytes(range(48))
    h = struct.pack(">BBHHH", kind, 0, 0, ident, seqno) + data
    c = sum(struct.unpack(f">{len(h) // 2}H", h))
    c = (c & 0xFFFF) + (c >> 16)
    c = ~((c & 0xFFFF) + (c >> 16)) & 0xFFFF
    return h[:2] + struct.pack(">H", c) + h[4:]


def ipoib_pings(ctx: Context, t0: float) -> Timed:
    """ARP in the partition's broadcast group, the unicast reply, then ICMP echo request/reply pairs."""
    s, out = ctx.s, []
    if not ctx.link.native:
        return out
    for p in s.pings:
        a, b, part = s.ports[p.src], s.ports[p.dst], s.partitions[p.partition]
        pk = _own_pkey(ctx, a, part.pkey)
        if pk is None:
            continue
        t = t0 + p.at
        arp = struct.pack(">HHBBH", 32, ETHERTYPE_IPV4, 20, 4, 1) + _hwaddr(a) + a.ip4 + bytes(20) + b.ip4
        out.append(
            (
                t,
                ctx.ud(
                    a,
                    b,
                    0x64,
                    pk,
                    MCAST_QPN,
                    a.ipoib_qpn,
                    IPOIB_QKEY,
                    b"\x08\x06\x00\x00" + arp,
                    dlid=part.mlid,
                    dgid=part.mgid,
                ),
            )
        )
        bpk = _own_pkey(ctx, b, part.pkey)
        if bpk is None or not ctx.rx_accepts(b, pk):
            continue  # not in the group: the ARP never reaches it
        t += 20e-6
        rep = struct.pack(">HHBBH", 32, ETHERTYPE_IPV4, 20, 4, 2) + _hwaddr(b) + b.ip4 + _hwaddr(a) + a.ip4
        out.append((t, ctx.ud(b, a, 0x64, bpk, a.ipoib_qpn, b.ipoib_qpn, IPOIB_QKEY, b"\x08\x06\x00\x00" + rep)))
        for k in range(p.count):
            t += 100e-6
            req = _ip4(a.ip4, b.ip4, 1, _icmp(8, _ICMP_ID, k + 1), 0x100 + k)
            out.append((t, ctx.ud(a, b, 0x64, pk, b.ipoib_qpn, a.ipoib_qpn, IPOIB_QKEY, b"\x08\x00\x00\x00" + req)))
            rpl = _ip4(b.ip4, a.ip4, 1, _icmp(0, _ICMP_ID, k + 1), 0x200 + k)
            out.append(
                (t + 8e-6, ctx.ud(b, a, 0x64, bpk, a.ipoib_qpn, b.ipoib_qpn, IPOIB_QKEY, b"\x08\x00\x00\x00" + rpl))
            )
    return out
