"""SMP virtualization attributes (vendor-specific SMA attributes 0xFFB0-0xFFB6) that NVIDIA/Mellanox opensm
uses with `virt_enabled` for SR-IOV vports.  Layouts from the MLNX opensm include/iba/ib_types.h:
ib_virtualization_info_t, ib_vport_info_t, ib_vnode_info_t, ib_vport_state_t and the VPort P_Key/GUID tables
(IB_MAD_ATTR_V_PKEY_TABLE, IB_MAD_ATTR_VPORT_GUID_INFO), which reuse ib_pkey_table_t / ib_guid_info_t.
Upstream linux-rdma/opensm does not define them; tshark 4.0 does not decode them.
"""

from scapy.fields import (
    BitField,
    FieldListField,
    PacketListField,
    StrFixedLenField,
    XBitField,
    XByteField,
    XLongField,
    XShortField,
)

from dissectors.mad.base import Attr, TextField
from dissectors.mad.smp import PKeyEntry


class NibbleListField(StrFixedLenField):
    """`count` 4-bit values, two per byte, high nibble first (ib_vport_state_t: even vport, then odd)."""

    __slots__ = ["nibbles"]

    def __init__(self, name, count):
        StrFixedLenField.__init__(self, name, [0] * count, count // 2)
        self.nibbles = count

    def m2i(self, pkt, x):
        return [n for b in x for n in (b >> 4, b & 0xF)]

    def i2m(self, pkt, x):
        vals = list(x or []) + [0] * (self.nibbles - len(x or []))
        return bytes(((vals[i] & 0xF) << 4) | (vals[i + 1] & 0xF) for i in range(0, self.nibbles, 2))

    def any2i(self, pkt, x):
        return self.m2i(pkt, x) if isinstance(x, bytes) else x

    def i2repr(self, pkt, x):
        return repr(x)


class VirtualizationInfo(Attr):
    """VirtualizationInfo (0xFFB0), ib_virtualization_info_t: VPortCap, VPortIndexTop, VirtualizationEnable
    (bit 7), VClientReregister (bit 6), VPortStateChange (bit 5), revision, capability mask."""

    ws_name = "virtualizationinfo"
    fields_desc = [
        XShortField("vportcap", 0),
        XShortField("vportindextop", 0),
        BitField("virtualizationenable", 0, 1),
        BitField("vclientreregister", 0, 1),
        BitField("vportstatechange", 0, 1),
        BitField("_r1", 0, 5),
        XByteField("_r2", 0),
        XByteField("virtualizationrevision", 0),
        XByteField("capabilitymask", 0),
    ]


class VPortState(Attr):
    """VPortState (0xFFB3), ib_vport_state_t: 128 vport states of 4 bits (64 bytes), for the block of
    vports the attribute modifier selects; entry i is vport (block * 128 + i)."""

    ws_name = "vportstate"
    fields_desc = [NibbleListField("state", 128)]


class VPortInfo(Attr):
    """VPortInfo (0xFFB1), ib_vport_info_t.  Bit positions follow ib_types.h's accessors
    (IB_VPORT_INFO_STATE_SHIFT 4, CLIENT_REREGISTER_SHIFT 3, LID_REQUIRED_SHIFT 2)."""

    ws_name = "vportinfo"
    fields_desc = [
        XBitField("vportstate", 0, 4),
        BitField("clientreregister", 0, 1),
        BitField("lidrequired", 0, 1),
        BitField("_r1", 0, 2),
        XByteField("guidcap", 0),
        XShortField("capabilitymask", 0),
        XShortField("p_keyviolations", 0),
        XShortField("q_keyviolations", 0),
        XShortField("vportlid", 0),
        XShortField("lidbyvportindex", 0),
        XLongField("portguid", 0),
        XLongField("portprofile", 0),
    ]


class VNodeInfo(Attr):
    """VNodeInfo (0xFFB2), ib_vnode_info_t: PartitionCap, LocalPortNum, NumPorts, VNodeGUID."""

    ws_name = "vnodeinfo"
    fields_desc = [
        XShortField("partitioncap", 0),
        XByteField("localportnum", 0),
        XByteField("numports", 0),
        XLongField("vnodeguid", 0),
    ]


class VNodeDescription(Attr):
    """VNodeDescription (0xFFB4, IB_MAD_ATTR_VNODE_DESC): 64 bytes of text like NodeDescription."""

    ws_name = "vnodedescription"
    fields_desc = [TextField("nodestring", "", 64)]


class VPortPKeyEntry(PKeyEntry):
    ws_name = "vportp_keytable"


class VPortP_KeyTable(Attr):
    """VPort P_Key table block (0xFFB6, IB_MAD_ATTR_V_PKEY_TABLE): 32 P_Keys as ib_pkey_table_t, membership
    bit (1 = full) and 15-bit base; the attribute modifier carries the vport index and the block."""

    ws_name = "vportp_keytable"
    fields_desc = [PacketListField("entries", [], VPortPKeyEntry, count_from=lambda p: 32)]

    def pkeys(self):
        return [e.p_key_full for e in self.entries]


class VPortGUIDInfo(Attr):
    """VPort GUIDInfo block (0xFFB5, IB_MAD_ATTR_VPORT_GUID_INFO): 8 GUIDs as ib_guid_info_t."""

    ws_name = "vportguidinfo"
    fields_desc = [FieldListField("guid", [0] * 8, XLongField("", 0), count_from=lambda p: 8)]
