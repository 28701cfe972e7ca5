"""Management datagrams the generator sends: SMPs (SM sweep, traps), SA PathRecord, CM connection setup.

Each function returns the 256-byte MAD (header + class data).  Layouts follow IBA Vol 1: SMP §14.2.1.1
(LID-routed) and §14.2.1.2 (directed route); NodeInfo §14.2.5.3, PortInfo §14.2.5.6, P_KeyTable §14.2.5.7,
SMInfo §14.2.5.13, Notice/traps 256-258 §14.2.5.1 and §14.3.11 (data details as opensm's ib_types.h
`ib_mad_notice_attr_t` ntc_256 / ntc_257_258 name them); SA header §15.2.1, PathRecord §15.2.5.16,
MCMemberRecord §15.2.5.17 (component mask bits as opensm's IB_MCR_COMPMASK_*); CM REQ/REP/RTU/DREQ/DREP
§12.6.5-12.6.11.
"""

import struct

from dissectors.numbers import IPOIB_QKEY, PERMISSIVE_LID
from ibwire.synth.headers import mad_header, pad_to

# Management classes and methods (IBA §13.4.4, §13.4.5)
CLASS_SMP_LID, CLASS_SMP_DR, CLASS_SA, CLASS_CM = 0x01, 0x81, 0x03, 0x07
GET, SET, SEND, TRAP, GET_RESP, TRAP_REPRESS = 0x01, 0x02, 0x03, 0x05, 0x81, 0x07
ATTR_NOTICE, ATTR_NODE_INFO, ATTR_PORT_INFO, ATTR_PKEY_TABLE, ATTR_SM_INFO = 0x0002, 0x0011, 0x0015, 0x0016, 0x0020
ATTR_PATH_RECORD, ATTR_MC_MEMBER_RECORD = 0x0035, 0x0038
SA_STATUS_REQ_INVALID = 0x0200  # MAD status, class-specific bits 8-15: ERR_REQ_INVALID (IBA §15.2.1.1)
CM_REQ, CM_REP, CM_RTU, CM_DREQ, CM_DREP = 0x0010, 0x0013, 0x0014, 0x0015, 0x0016


def _smp_dr(method, attr, tid, data, attr_mod=0, hops=1, response=False, mkey=0, route=None):
    """`route`: the exit port at each hop (InitialPath[1..hops]); default 1, 2, ... ."""
    status = 0x8000 if response else 0  # D bit: direction of a directed-route SMP
    hop_ptr = hops + 1 if response else 0
    hdr = mad_header(CLASS_SMP_DR, 1, method, attr, tid, attr_mod, status, (hop_ptr << 8) | hops)
    path = bytes([0]) + bytes(route if route is not None else range(1, hops + 1))
    body = struct.pack(">QHH", mkey, PERMISSIVE_LID, PERMISSIVE_LID) + bytes(28) + pad_to(data, 64)
    body += pad_to(path, 64) + pad_to(path if response else b"", 64)
    return hdr + body


def _smp_lid(method, attr, tid, data, attr_mod=0, mkey=0):
    hdr = mad_header(CLASS_SMP_LID, 1, method, attr, tid, attr_mod)
    return hdr + struct.pack(">Q", mkey) + bytes(32) + pad_to(data, 64) + bytes(128)


def smp(method, attr, tid, data=b"", attr_mod=0, directed=False, hops=1, response=False, route=None, mkey=0):
    if directed:
        return _smp_dr(method, attr, tid, data, attr_mod, hops, response, mkey=mkey, route=route)
    return _smp_lid(method, attr, tid, data, attr_mod, mkey=mkey)


def node_info(
    node_type,
    num_ports,
    sys_guid,
    node_guid,
    port_guid,
    port_num=1,
    device_id=0x101B,
    vendor_id=0x0002C9,
    partition_cap=128,
):
    """NodeInfo: node_type 1 = CA, 2 = switch (ConnectX-6 device id 0x101b, Mellanox vendor id)."""
    return struct.pack(
        ">BBBBQQQHHIB",
        1,
        1,
        node_type,
        num_ports,
        sys_guid,
        node_guid,
        port_guid,
        partition_cap,
        device_id,
        0,
        port_num,
    ) + vendor_id.to_bytes(3, "big")


def port_info(
    lid,
    sm_lid,
    port_num=1,
    state=4,
    gid_prefix=0xFE80000000000000,
    pkey_violations=0,
    neighbor_mtu=5,
    mkey=0,
    mkey_protect=0,
):
    """PortInfo: state 1 Down, 2 Init, 3 Armed, 4 Active; physical state 5 LinkUp; width 4x, speed HDR;
    `mkey` with M_KeyProtectBits `mkey_protect` (1: a Set must carry the M_Key, IBA §14.2.4.1)."""
    b = bytearray(64)
    struct.pack_into(">QQHHIHH", b, 0, mkey, gid_prefix, lid, sm_lid, 0x02510868, 0, 0)
    b[28] = port_num
    b[29], b[30], b[31] = 3, 3, 2  # link width enabled / supported / active (4x)
    b[32] = (1 << 4) | state  # link speed supported, port state
    b[33] = (5 << 4) | 2  # physical state LinkUp, link down default Polling
    b[34] = mkey_protect << 6  # M_KeyProtectBits, LMC 0
    b[35] = (1 << 4) | 1
    b[36] = neighbor_mtu << 4  # NeighborMTU, MasterSMSL 0
    b[37] = 4 << 4  # VLCap VL0-7
    b[41] = 5  # MTUCap 4096
    b[43] = (4 << 4) | 0x0C  # OperationalVLs, partition enforcement in/out
    struct.pack_into(">H", b, 46, pkey_violations)
    b[51] = 18  # subnet timeout
    b[52] = 20  # response time value
    return bytes(b)


def pkey_table(pkeys):
    """One 32-entry P_KeyTable block; unused entries are 0 (invalid)."""
    return struct.pack(">32H", *(list(pkeys) + [0] * (32 - len(pkeys))))


def sm_info(guid, state=3, priority=0, act_count=0, sm_key=0):
    """SMInfo: state 1 discovering, 2 standby, 3 master (IBA §14.2.5.13)."""
    return struct.pack(">QQIB", guid, sm_key, act_count, (priority << 4) | state)


def _notice_head(trap_num, issuer_lid, count=1):
    """Generic notice, type security (2), producer CA (1)."""
    return struct.pack(">IHHH", (0x82 << 24) | 1, trap_num, issuer_lid, count & 0x7FFF)


def notice_bad_key(trap_num, issuer_lid, lid1, lid2, key, sl, qp1, qp2, gid1, gid2, count=1):
    """Trap 257 (bad P_Key) or 258 (bad Q_Key): the offending packet's ends, its key, SL and QPs."""
    data = struct.pack(">HHHIII", 0, lid1, lid2, key, (sl << 28) | (qp1 & 0xFFFFFF), qp2 & 0xFFFFFF)
    return _notice_head(trap_num, issuer_lid, count) + data + gid1 + gid2


def notice_bad_mkey(issuer_lid, offender_lid, method, attr, attr_mod, mkey, count=1):
    """Trap 256 (bad M_Key): the offending SMP's source LID, method, attribute and M_Key; a LID-routed SMP
    leaves DRSLID, the DR notice bits and the return path zero."""
    data = struct.pack(">HHHBBHIQBB", 0, offender_lid, 0, method, 0, attr, attr_mod, mkey, 0, 0) + bytes(30)
    return _notice_head(256, issuer_lid, count) + data


def trap(tid, notice):
    return _smp_lid(TRAP, ATTR_NOTICE, tid, notice)


def trap_repress(tid, notice):
    return _smp_lid(TRAP_REPRESS, ATTR_NOTICE, tid, notice)


# --- SA -----------------------------------------------------------------------------------------


def path_record(sgid, dgid, slid, dlid, pkey, mtu=5, rate=16, sl=0, lifetime=18, service_id=0):
    return (
        struct.pack(">Q", service_id)
        + dgid
        + sgid
        + struct.pack(">HHI", dlid, slid, 0)
        + struct.pack(">BBHHBBBB", 0, 0x80 | 1, pkey, sl, (2 << 6) | mtu, (2 << 6) | rate, (2 << 6) | lifetime, 0)
        + bytes(6)
    )


PR_MASK_QUERY = (1 << 2) | (1 << 3) | (1 << 11) | (1 << 13)  # DGID, SGID, NumbPath, P_Key


def mc_member_record(mgid, port_gid, pkey, qkey=IPOIB_QKEY, mlid=0, mtu=4, rate=7, sl=0, scope=2, join_state=1):
    """MCMemberRecord (52 bytes, padded to 56): a full-member (JoinState 1) link-local (scope 2) join."""
    return (
        mgid
        + port_gid
        + struct.pack(
            ">IHBBHBBIB",
            qkey,
            mlid,
            (2 << 6) | mtu,
            0,
            pkey,
            (2 << 6) | rate,
            (2 << 6) | 18,
            sl << 28,
            (scope << 4) | join_state,
        )
        + bytes(3 + 4)
    )


# IPoIB join of an existing group: MGID, PortGID, Q_Key, TClass, P_Key, SL, FlowLabel, JoinState (opensm
# IB_MCR_COMPMASK_* bits 0, 1, 2, 6, 7, 12, 13, 16)
MCR_MASK_JOIN = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 6) | (1 << 7) | (1 << 12) | (1 << 13) | (1 << 16)


def sa(method, attr, tid, data, comp_mask=0, status=0):
    """SA MAD: MAD header, RMPP header (inactive), SM_Key, attribute offset, component mask, 200 data bytes."""
    hdr = mad_header(CLASS_SA, 2, method, attr, tid, status=status)
    rmpp = struct.pack(">BBBBII", 1, 0, 0, 0, 0, 0)
    return hdr + rmpp + struct.pack(">QHHQ", 0, len(data) // 8, 0, comp_mask) + pad_to(data, 200)


# --- CM -----------------------------------------------------------------------------------------


def cm(attr, tid, data):
    return mad_header(CLASS_CM, 2, SEND, attr, tid) + pad_to(data, 232)


def cm_req(comm_id, service_id, ca_guid, qpn, psn, pkey, slid, dlid, sgid, dgid, mtu=3, transport=0):
    """REQ for an RC (transport 0) or UC (1) or XRC connection; primary path only."""
    d = struct.pack(">IIQQII", comm_id, 0, service_id, ca_guid, 0, 0)
    d += struct.pack(">III", (qpn << 8) | 4, 4, (0 << 8) | (22 << 3) | (transport << 1) | 1)
    d += struct.pack(">IHBB", (psn << 8) | (22 << 3) | 7, pkey, (mtu << 4) | 7, (15 << 4))
    d += struct.pack(">HH", slid, dlid) + sgid + dgid + struct.pack(">IBBBB", 3 << 0 | 0, 0, 64, 0x08, 18 << 3)
    return cm(CM_REQ, 0, d)


def cm_rep(comm_id, remote_comm_id, ca_guid, qpn, psn):
    d = struct.pack(">IIIIII", comm_id, remote_comm_id, 0, qpn << 8, 0, psn << 8)
    d += struct.pack(">BBBBQ", 4, 4, (15 << 3) | 1, 7 << 5, ca_guid)
    return cm(CM_REP, 0, d)


def cm_rtu(comm_id, remote_comm_id):
    return cm(CM_RTU, 0, struct.pack(">II", comm_id, remote_comm_id))


def cm_dreq(comm_id, remote_comm_id, remote_qpn):
    return cm(CM_DREQ, 0, struct.pack(">III", comm_id, remote_comm_id, remote_qpn << 8))


def cm_drep(comm_id, remote_comm_id):
    return cm(CM_DREP, 0, struct.pack(">II", comm_id, remote_comm_id))


def with_tid(mad: bytes, tid: int) -> bytes:
    """The MAD with its transaction id replaced (bytes 8-15 of the common header)."""
    return mad[:8] + struct.pack(">Q", tid) + mad[16:]
