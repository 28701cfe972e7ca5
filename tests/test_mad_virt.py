"""SMP virtualization attributes (VirtualizationInfo, VPortInfo, VNodeInfo, VPortState, VPort P_Key and GUID
tables) decoded from byte layouts written here from the struct definitions in MLNX opensm
include/iba/ib_types.h (ib_virtualization_info_t, ib_vport_info_t, ib_vnode_info_t, ib_vport_state_t,
ib_pkey_table_t, ib_guid_info_t; attribute ids IB_MAD_ATTR_* 0xFFB0-0xFFB6).  tshark 4.0 does not decode
these attributes, so the ground truth is the declared bytes, not an oracle."""

import struct

from dissectors.mad import MAD, flat
from dissectors.mad.smp import SMPLID

SMP_DATA_AT = 64  # LID-routed SMP: 24-byte MAD header, M_Key, 32 reserved, then 64 bytes of data


def mad_with(attr_id: int, data: bytes, mod: int = 0) -> MAD:
    """A LID-routed SubnGetResp carrying `data` as its 64-byte SMP data."""
    head = bytes(
        MAD(mgmtclass=0x01, method=0x81, attributeid=attr_id, attributemodifier=mod, transactionid=0x42)
        / SMPLID(mkey=0)
    )
    raw = head[:SMP_DATA_AT] + data.ljust(64, b"\0")
    return MAD(raw.ljust(256, b"\0"))


def test_virtualization_info():
    # ib_virtualization_info_t: [0:2] vport_cap, [2:4] vport_index_top, [4] virt_enable_rereg
    # (bit7 VirtualizationEnable, bit6 VClientReregister, bit5 VPortStateChange), [5] reserved,
    # [6] virt_revision, [7] cap_mask, [8:63] reserved
    data = struct.pack(">HHBBBB", 0x0040, 0x0005, 0x80 | 0x20, 0, 0x01, 0x00)
    f = flat(mad_with(0xFFB0, data))
    assert f["virtualizationinfo.vportcap"] == 64
    assert f["virtualizationinfo.vportindextop"] == 5
    assert f["virtualizationinfo.virtualizationenable"] == 1
    assert f["virtualizationinfo.vclientreregister"] == 0
    assert f["virtualizationinfo.vportstatechange"] == 1
    assert f["virtualizationinfo.virtualizationrevision"] == 1
    assert mad_with(0xFFB0, data).mysummary() == "SubnGetResp(VirtualizationInfo)"


def test_vport_info():
    # ib_vport_info_t: [0] state_rereg (state = bits 7..4, client rereg = bit 3, lid required = bit 2),
    # [1] guid_cap, [2:4] cap_mask, [4:6] p_key_violations, [6:8] q_key_violations, [8:10] vport_lid,
    # [10:12] lid_by_vport_index, [12:20] port_guid, [20:28] port_profile, [28:64] reserved
    data = bytes([(4 << 4) | 0x08 | 0x04, 1]) + struct.pack(
        ">HHHHHQQ", 0x0021, 7, 2, 0x0013, 0, 0x0002C90300A1F002, 0x1122334455667788
    )
    f = flat(mad_with(0xFFB1, data, mod=2))
    assert f["vportinfo.vportstate"] == 4  # Active
    assert f["vportinfo.clientreregister"] == 1
    assert f["vportinfo.lidrequired"] == 1
    assert f["vportinfo.guidcap"] == 1
    assert f["vportinfo.capabilitymask"] == 0x0021  # IsCommunicationManagementSupported | IsSM
    assert f["vportinfo.p_keyviolations"] == 7
    assert f["vportinfo.q_keyviolations"] == 2
    assert f["vportinfo.vportlid"] == 0x13
    assert f["vportinfo.lidbyvportindex"] == 0
    assert f["vportinfo.portguid"] == 0x0002C90300A1F002
    assert f["vportinfo.portprofile"] == 0x1122334455667788
    assert f["mad.attributemodifier"] == 2


def test_vnode_info_and_description():
    # ib_vnode_info_t: [0:2] partition_cap, [2] local_port_num, [3] num_ports, [4:12] vnode_guid, [12:64] resvd
    data = struct.pack(">HBBQ", 128, 1, 1, 0x0002C90300A1E002)
    f = flat(mad_with(0xFFB2, data))
    assert (f["vnodeinfo.partitioncap"], f["vnodeinfo.localportnum"], f["vnodeinfo.numports"]) == (128, 1, 1)
    assert f["vnodeinfo.vnodeguid"] == 0x0002C90300A1E002
    assert flat(mad_with(0xFFB4, b"vm3 HCA-1"))["vnodedescription.nodestring"] == "vm3 HCA-1"


def test_vport_state_nibbles():
    # ib_vport_state_t: 64 bytes, each holding two vport states: even vport in the high nibble, odd in the low
    data = bytes([0x41, 0x23]) + b"\0" * 62
    states = flat(mad_with(0xFFB3, data))["vportstate.state"]
    assert len(states) == 128
    assert states[:4] == [4, 1, 2, 3]  # vport 0 Active, 1 Down, 2 Init, 3 Armed
    assert set(states[4:]) == {0}


def test_vport_pkey_table_membership():
    # ib_pkey_table_t as VPort P_Key block: 32 big-endian entries, bit 15 = full member, bits 14..0 = base
    entries = [0xFFFF, 0x8001, 0x0002, 0x7FFF] + [0] * 28
    pkt = mad_with(0xFFB6, struct.pack(">32H", *entries), mod=(3 << 16) | 0)
    f = flat(pkt)
    assert f["vportp_keytable.membershiptype"][:4] == [1, 1, 0, 0]
    assert f["vportp_keytable.p_keybase"][:4] == [0x7FFF, 0x0001, 0x0002, 0x7FFF]
    from dissectors.mad.virt import VPortP_KeyTable

    assert pkt[VPortP_KeyTable].pkeys() == entries
    # a vport table must not look like the physical port's P_KeyTable to consumers of flat()
    assert not any(k.startswith("p_keytable.") for k in f)
    assert pkt.mysummary() == "SubnGetResp(VPortP_KeyTable)"


def test_vport_guid_info():
    guids = [0x0002C90300A1F002, 0, 0x0002C90300A1F102] + [0] * 5
    assert flat(mad_with(0xFFB5, struct.pack(">8Q", *guids)))["vportguidinfo.guid"] == guids


def test_build_round_trip_matches_declared_bytes():
    from dissectors.mad.virt import VPortInfo

    declared = bytes([0x4C, 1]) + struct.pack(">HHHHHQQ", 0x0021, 7, 2, 0x0013, 0, 0x0002C90300A1F002, 5)
    built = bytes(
        VPortInfo(
            vportstate=4,
            clientreregister=1,
            lidrequired=1,
            guidcap=1,
            capabilitymask=0x21,
            p_keyviolations=7,
            q_keyviolations=2,
            vportlid=0x13,
            portguid=0x0002C90300A1F002,
            portprofile=5,
        )
    )
    assert built == declared
