"""Subnet management packets (IBA Vol 1 §14.2): LID-routed (class 0x01) and directed-route (0x81)
headers and the SMP attributes of §14.2.5; layouts as in opensm ib_types.h (ib_smp_t, ib_node_info_t,
ib_port_info_t, ib_switch_info_t, ib_pkey_table_t, ib_sm_info_t ...)."""

from scapy.fields import (
    BitField,
    FieldListField,
    PacketListField,
    StrFixedLenField,
    ThreeBytesField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import bind_layers

from dissectors.mad.base import Attr, Entry, MirrorField, Reserved, TextField
from dissectors.mad.common import MAD, ClassData, mad_of
from dissectors.madnames import CAPABILITY_MASK

SMP_DATA = 64


class SMPLID(ClassData):
    """LID-routed SMP: M_Key, 32 reserved bytes, 64-byte SMP data, 128 reserved bytes."""

    name = "SMP (LID routed)"
    ws_name = "smplid"
    fields_desc = [XLongField("mkey", 0), Reserved("_reserved", 32), MirrorField("smpdata")]

    def post_dissect(self, s):
        if self.truncated is None:
            self.fields["smpdata"] = bytes(s[:SMP_DATA])
        return s


class SMPDirected(ClassData):
    """Directed-route SMP (§14.2.1.2): D bit, status, hop pointer/count live in the MAD header."""

    name = "SMP (Directed Route)"
    ws_name = "smpdirected"
    payload_window = (40, SMP_DATA)  # the attribute is dissected from SMP data, bytes 40-103 of the layer
    ws_alias = {"mkey": "smplid.mkey", "smpdata": "smplid.smpdata"}
    fields_desc = [
        MirrorField("d"),
        MirrorField("smpstatus"),
        MirrorField("hoppointer"),
        MirrorField("hopcount"),
        XLongField("mkey", 0),
        XShortField("drslid", 0xFFFF),
        XShortField("drdlid", 0xFFFF),
        Reserved("_reserved", 28),
        StrFixedLenField("_smpdata", b"\0" * SMP_DATA, SMP_DATA),
        StrFixedLenField("initialpath", b"\0" * 64, 64),
        StrFixedLenField("returnpath", b"\0" * 64, 64),
        MirrorField("smpdata"),
    ]

    def post_dissect(self, s):
        mad = mad_of(self)
        if mad is not None:
            self.fields.update(
                d=mad.status >> 15,
                smpstatus=mad.status & 0x7FFF,
                hoppointer=mad.classspecific >> 8,
                hopcount=mad.classspecific & 0xFF,
            )
        if self.truncated is None:
            self.fields["smpdata"] = self.fields.pop("_smpdata")
            return self.fields["smpdata"] + s
        return s

    def into_mad_header(self, p):
        """Write explicitly set d/smpstatus/hoppointer/hopcount into the MAD header bytes 4-7."""
        f = self.fields
        if not any(k in f and f[k] is not None for k in ("d", "smpstatus", "hoppointer", "hopcount")):
            return p
        status = int.from_bytes(p[4:6], "big")
        cs = int.from_bytes(p[6:8], "big")
        if f.get("d") is not None:
            status = (status & 0x7FFF) | (f["d"] << 15)
        if f.get("smpstatus") is not None:
            status = (status & 0x8000) | (f["smpstatus"] & 0x7FFF)
        if f.get("hoppointer") is not None:
            cs = (cs & 0xFF) | (f["hoppointer"] << 8)
        if f.get("hopcount") is not None:
            cs = (cs & 0xFF00) | f["hopcount"]
        return p[:4] + status.to_bytes(2, "big") + cs.to_bytes(2, "big") + p[8:]

    def post_build(self, p, pay):
        head, tail = p[:40], p[40:]
        if len(tail) == 128:  # _smpdata was taken by the payload at dissection
            tail = b"\0" * SMP_DATA + tail
        if pay:
            tail = pay[:SMP_DATA].ljust(SMP_DATA, b"\0") + tail[SMP_DATA:]
        return head + tail

    def path(self, which="initialpath"):
        """Port numbers of a directed route: bytes 1..hopcount of the path (§14.2.1.2)."""
        return list(getattr(self, which)[1 : (self.hopcount or 0) + 1])


bind_layers(MAD, SMPLID, mgmtclass=0x01)
bind_layers(MAD, SMPDirected, mgmtclass=0x81)


class NodeDescription(Attr):
    ws_name = "nodedescription"
    fields_desc = [TextField("nodestring", "", 64)]


class NodeInfo(Attr):
    """NodeInfo, §14.2.5.3 (40 bytes)."""

    ws_name = "nodeinfo"
    fields_desc = [
        XByteField("baseversion", 1),
        XByteField("classversion", 1),
        XByteField("nodetype", 1),
        XByteField("numports", 1),
        XLongField("systemimageguid", 0),
        XLongField("nodeguid", 0),
        XLongField("portguid", 0),
        XShortField("partitioncap", 0),
        XShortField("deviceid", 0),
        XIntField("revision", 0),
        XByteField("localportnum", 1),
        ThreeBytesField("vendorid", 0),
    ]


class SwitchInfo(Attr):
    """SwitchInfo, §14.2.5.4."""

    ws_name = "switchinfo"
    fields_desc = [
        XShortField("linearfdbcap", 0),
        XShortField("randomfdbcap", 0),
        XShortField("multicastfdbcap", 0),
        XShortField("linearfdbtop", 0),
        XByteField("defaultport", 0),
        XByteField("defaultmulticastprimaryport", 0),
        XByteField("defaultmulticastnotprimaryport", 0),
        XBitField("lifetimevalue", 0, 5),
        BitField("portstatechange", 0, 1),
        XBitField("optimizedsltovlmappingprogramming", 0, 2),
        XShortField("lidsperport", 0),
        XShortField("partitionenforcementcap", 0),
        BitField("inboundenforcementcap", 0, 1),
        BitField("outboundenforcementcap", 0, 1),
        BitField("filterrawinboundcap", 0, 1),
        BitField("filterrawoutboundcap", 0, 1),
        BitField("enhancedportzero", 0, 1),
        BitField("_r", 0, 3),
        XShortField("multicastfdbtop", 0),
    ]


class GUIDInfo(Attr):
    """GUIDInfo, §14.2.5.5: a block of 8 port GUIDs."""

    ws_name = "guidinfo"
    fields_desc = [FieldListField("guid", [0] * 8, XLongField("", 0), count_from=lambda p: 8)]


IS_SM = dict(CAPABILITY_MASK)["issm"]


class PortInfo(Attr):
    """PortInfo, §14.2.5.6 (64 bytes) incl. CapabilityMask2 and the extended link speeds."""

    ws_name = "portinfo"
    ws_alias = {"gidprefix": "portinfo.guid"}
    ws_bits = {"capabilitymask": CAPABILITY_MASK}
    fields_desc = [
        XLongField("m_key", 0),
        XLongField("gidprefix", 0xFE80000000000000),
        XShortField("lid", 0),
        XShortField("mastersmlid", 0),
        XIntField("capabilitymask", 0),
        XShortField("diagcode", 0),
        XShortField("m_keyleaseperiod", 0),
        XByteField("localportnum", 0),
        XByteField("linkwidthenabled", 0),
        XByteField("linkwidthsupported", 0),
        XByteField("linkwidthactive", 0),
        XBitField("linkspeedsupported", 0, 4),
        XBitField("portstate", 0, 4),
        XBitField("portphysicalstate", 0, 4),
        XBitField("linkdowndefaultstate", 0, 4),
        XBitField("m_keyprotectbits", 0, 2),
        BitField("_r1", 0, 3),
        XBitField("lmc", 0, 3),
        XBitField("linkspeedactive", 0, 4),
        XBitField("linkspeedenabled", 0, 4),
        XBitField("neighbormtu", 0, 4),
        XBitField("mastersmsl", 0, 4),
        XBitField("vlcap", 0, 4),
        XBitField("inittype", 0, 4),
        XByteField("vlhighlimit", 0),
        XByteField("vlarbitrationhighcap", 0),
        XByteField("vlarbitrationlowcap", 0),
        XBitField("inittypereply", 0, 4),
        XBitField("mtucap", 0, 4),
        XBitField("vlstallcount", 0, 3),
        XBitField("hoqlife", 0, 5),
        XBitField("operationalvls", 0, 4),
        BitField("partitionenforcementinbound", 0, 1),
        BitField("partitionenforcementoutbound", 0, 1),
        BitField("filterrawinbound", 0, 1),
        BitField("filterrawoutbound", 0, 1),
        XShortField("m_keyviolations", 0),
        XShortField("p_keyviolations", 0),
        XShortField("q_keyviolations", 0),
        XByteField("guidcap", 0),
        BitField("clientreregister", 0, 1),
        XBitField("multicastpkeytrapsuppressionenabled", 0, 2),
        XBitField("subnettimeout", 0, 5),
        BitField("_r2", 0, 3),
        XBitField("resptimevalue", 0, 5),
        XBitField("localphyerrors", 0, 4),
        XBitField("overrunerrors", 0, 4),
        XShortField("maxcredithint", 0),
        Reserved("_r3", 1),
        ThreeBytesField("linkroundtriplatency", 0),
        XShortField("capabilitymask2", 0),
        XBitField("linkspeedextactive", 0, 4),
        XBitField("linkspeedextsupported", 0, 4),
        BitField("_r4", 0, 3),
        XBitField("linkspeedextenabled", 0, 5),
    ]


class PKeyEntry(Entry):
    """One P_Key: membership bit (1 = full member) and the 15-bit base (§10.9.1)."""

    ws_name = "p_keytable"
    fields_desc = [BitField("membershiptype", 0, 1), XBitField("p_keybase", 0, 15)]

    @property
    def p_key_full(self):
        return (self.membershiptype << 15) | self.p_keybase


class P_KeyTable(Attr):
    """P_KeyTable block, §14.2.5.7: 32 P_Keys; the attribute modifier selects the block."""

    ws_name = "p_keytable"
    fields_desc = [PacketListField("entries", [], PKeyEntry, count_from=lambda p: 32), MirrorField("p_keytableblock")]

    def post_dissect(self, s):
        if self.truncated is None and self.raw_packet_cache is not None:
            self.fields["p_keytableblock"] = bytes(self.raw_packet_cache)
        return s

    def pkeys(self):
        return [e.p_key_full for e in self.entries]


class SLtoVLEntry(Entry):
    ws_name = "sltovlmappingtable"
    fields_desc = [XBitField("sltovlhighbits", 0, 4), XBitField("sltovllowbits", 0, 4)]


class SLtoVLMappingTable(Attr):
    """SLtoVLMappingTable, §14.2.5.8: VL for each of the 16 SLs, two per byte."""

    ws_name = "sltovlmappingtable"
    fields_desc = [PacketListField("entries", [], SLtoVLEntry, count_from=lambda p: 8)]


class VLArbEntry(Entry):
    ws_name = "vlarbitrationtable"
    fields_desc = [BitField("_r", 0, 4), XBitField("vl", 0, 4), XByteField("weight", 0)]


class VLArbitrationTable(Attr):
    """VLArbitrationTable, §14.2.5.9: 32 (VL, weight) entries."""

    ws_name = "vlarbitrationtable"
    fields_desc = [PacketListField("entries", [], VLArbEntry, count_from=lambda p: 32)]


class LinearForwardingTable(Attr):
    """LinearForwardingTable block, §14.2.5.10: egress port for 64 consecutive LIDs."""

    ws_name = "linearforwardingtable"
    fields_desc = [FieldListField("port", [0] * 64, XByteField("", 0), count_from=lambda p: 64)]


class MulticastForwardingTable(Attr):
    """MulticastForwardingTable block, §14.2.5.12: 32 port masks of 16 bits."""

    ws_name = "multicastforwardingtable"
    fields_desc = [FieldListField("portmask", [0] * 32, XShortField("", 0), count_from=lambda p: 32)]


class SMInfo(Attr):
    """SMInfo, §14.2.5.13."""

    ws_name = "sminfo"
    fields_desc = [
        XLongField("guid", 0),
        XLongField("sm_key", 0),
        XIntField("actcount", 0),
        XBitField("priority", 0, 4),
        XBitField("smstate", 0, 4),
    ]
