"""Subnet administration (class 0x03, IBA Vol 1 §15.2): RMPP header (§13.6.2.1), SA header and the
SA records of §15.2.5; opensm ib_types.h ib_sa_mad_t, ib_path_rec_t, ib_member_rec_t, ib_service_record_t.
Records embed SMP attributes as packet fields, so `nodeinfo.nodetype` keeps its name inside NodeRecord."""

from scapy.fields import (
    BitField,
    ConditionalField,
    FieldListField,
    IP6Field,
    PacketField,
    StrFixedLenField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import bind_layers

from dissectors.mad.base import Attr, MadPacket, Reserved
from dissectors.mad.common import MAD, ClassData, InformInfo
from dissectors.mad.smp import (
    GUIDInfo,
    LinearForwardingTable,
    MulticastForwardingTable,
    NodeDescription,
    NodeInfo,
    P_KeyTable,
    PortInfo,
    SLtoVLMappingTable,
    SMInfo,
    SwitchInfo,
    VLArbitrationTable,
)

SA_HEADER = 56  # MAD 24 + RMPP 12 + SA 20: where SA data starts in every segment
SA_DATA = 200


class RMPP(MadPacket):
    """RMPP header, §13.6.2.1: RRespTime is the high 5 bits, RMPPFlags (Active/First/Last) the low 3."""

    ws_name = "rmpp"
    fields_desc = [
        XByteField("rmppversion", 1),
        XByteField("rmpptype", 0),
        XBitField("rresptime", 0, 5),
        XBitField("rmppflags", 0, 3),
        XByteField("rmppstatus", 0),
        ConditionalField(XIntField("data1", 0), lambda p: p.rmpptype not in (1, 2)),
        ConditionalField(XIntField("data2", 0), lambda p: p.rmpptype not in (1, 2)),
        ConditionalField(XIntField("segmentnumber", 0), lambda p: p.rmpptype in (1, 2)),
        ConditionalField(XIntField("payloadlength", 0), lambda p: p.rmpptype == 1),
        ConditionalField(XIntField("newwindowlast", 0), lambda p: p.rmpptype == 2),
    ]


class SA(ClassData):
    """SA header, §15.2.1: SM_Key, AttributeOffset (record size in 8-byte words), ComponentMask."""

    ws_name = "sa"
    fields_desc = [
        XLongField("smkey", 0),
        XShortField("attributeoffset", 0),
        Reserved("_reserved", 2),
        XLongField("componentmask", 0),
    ]


bind_layers(MAD, RMPP, mgmtclass=0x03)
bind_layers(RMPP, SA)


def _pf(name, cls):
    return PacketField(name, cls(), cls)


class NodeRecord(Attr):
    ws_name = "noderecord"
    ws_alias = {"lid": "sa.lid"}
    fields_desc = [
        XShortField("lid", 0),
        Reserved("_r", 2),
        _pf("nodeinfo", NodeInfo),
        _pf("nodedescription", NodeDescription),
    ]


class PortInfoRecord(Attr):
    ws_name = "portinforecord"
    ws_alias = {"endportlid": "sa.endportlid", "portnum": "sa.portnum"}
    fields_desc = [
        XShortField("endportlid", 0),
        XByteField("portnum", 0),
        XByteField("options", 0),
        _pf("portinfo", PortInfo),
    ]


class SLtoVLMappingTableRecord(Attr):
    ws_name = "sltovlmappingtablerecord"
    ws_alias = {"lid": "sa.lid", "inputportnum": "sa.inputportnum", "outputportnum": "sa.outputportnum"}
    fields_desc = [
        XShortField("lid", 0),
        XByteField("inputportnum", 0),
        XByteField("outputportnum", 0),
        Reserved("_r", 4),
        _pf("sltovlmappingtable", SLtoVLMappingTable),
    ]


class SwitchInfoRecord(Attr):
    ws_name = "switchinforecord"
    ws_alias = {"lid": "sa.lid"}
    fields_desc = [XShortField("lid", 0), Reserved("_r", 2), _pf("switchinfo", SwitchInfo)]


class LinearForwardingTableRecord(Attr):
    ws_name = "linearforwardingtablerecord"
    ws_alias = {"lid": "sa.lid", "blocknum": "sa.blocknum_sixteenbit"}
    fields_desc = [
        XShortField("lid", 0),
        XShortField("blocknum", 0),
        Reserved("_r", 4),
        _pf("linearforwardingtable", LinearForwardingTable),
    ]


class MulticastForwardingTableRecord(Attr):
    ws_name = "multicastforwardingtablerecord"
    ws_alias = {"lid": "sa.lid", "position": "sa.position", "blocknum": "sa.blocknum_ninebit"}
    fields_desc = [
        XShortField("lid", 0),
        XBitField("position", 0, 4),
        BitField("_r0", 0, 3),
        XBitField("blocknum", 0, 9),
        Reserved("_r", 4),
        _pf("multicastforwardingtable", MulticastForwardingTable),
    ]


class SMInfoRecord(Attr):
    ws_name = "sminforecord"
    ws_alias = {"lid": "sa.lid"}
    fields_desc = [XShortField("lid", 0), Reserved("_r", 2), _pf("sminfo", SMInfo)]


class VLArbitrationTableRecord(Attr):
    ws_name = "vlarbitrationtablerecord"
    ws_alias = {"lid": "sa.lid", "outputportnum": "sa.outputportnum", "blocknum": "sa.blocknum_eightbit"}
    fields_desc = [
        XShortField("lid", 0),
        XByteField("outputportnum", 0),
        XByteField("blocknum", 0),
        Reserved("_r", 4),
        _pf("vlarbitrationtable", VLArbitrationTable),
    ]


class LinkRecord(Attr):
    ws_name = "linkrecord"
    fields_desc = [
        XShortField("fromlid", 0),
        XByteField("fromport", 0),
        XByteField("toport", 0),
        XShortField("tolid", 0),
    ]


class GuidInfoRecord(Attr):
    ws_name = "guidinforecord"
    ws_alias = {"lid": "sa.lid", "blocknum": "sa.blocknum_eightbit"}
    fields_desc = [XShortField("lid", 0), XByteField("blocknum", 0), Reserved("_r", 5), _pf("guidinfo", GUIDInfo)]


class ServiceRecord(Attr):
    """ServiceRecord, §15.2.5.14 (176 bytes)."""

    ws_name = "servicerecord"
    ws_alias = {
        "serviceid": "linkrecord.serviceid",
        "servicegid": "linkrecord.servicegid",
        "servicep_key": "linkrecord.servicep_key",
        "servicelease": "linkrecord.servicelease",
        "servicekey": "linkrecord.servicekey",
        "servicename": "linkrecord.servicename",
    }
    fields_desc = [
        XLongField("serviceid", 0),
        IP6Field("servicegid", "::"),
        XShortField("servicep_key", 0xFFFF),
        Reserved("_r", 2),
        XIntField("servicelease", 0),
        StrFixedLenField("servicekey", b"\0" * 16, 16),
        StrFixedLenField("servicename", b"", 64),
        FieldListField("servicedata8", [0] * 16, XByteField("", 0), count_from=lambda p: 16),
        FieldListField("servicedata16", [0] * 8, XShortField("", 0), count_from=lambda p: 8),
        FieldListField("servicedata32", [0] * 4, XIntField("", 0), count_from=lambda p: 4),
        FieldListField("servicedata64", [0] * 2, XLongField("", 0), count_from=lambda p: 2),
    ]


class P_KeyTableRecord(Attr):
    ws_name = "p_keytablerecord"
    ws_alias = {"lid": "sa.lid", "blocknum": "sa.blocknum_sixteenbit", "portnum": "sa.portnum"}
    fields_desc = [
        XShortField("lid", 0),
        XShortField("blocknum", 0),
        XByteField("portnum", 0),
        Reserved("_r", 3),
        _pf("p_keytable", P_KeyTable),
    ]


class PathRecord(Attr):
    """PathRecord, §15.2.5.16 (64 bytes); the first 8 bytes are the ServiceID in IBA 1.2.1+."""

    ws_name = "pathrecord"
    fields_desc = [
        XLongField("serviceid", 0),
        IP6Field("dgid", "::"),
        IP6Field("sgid", "::"),
        XShortField("dlid", 0),
        XShortField("slid", 0),
        BitField("rawtraffic", 0, 1),
        BitField("_r0", 0, 3),
        XBitField("flowlabel", 0, 20),
        XByteField("hoplimit", 0),
        XByteField("tclass", 0),
        BitField("reversible", 0, 1),
        XBitField("numbpath", 0, 7),
        XShortField("p_key", 0xFFFF),
        XBitField("qosclass", 0, 12),
        XBitField("sl", 0, 4),
        XBitField("mtuselector", 0, 2),
        XBitField("mtu", 0, 6),
        XBitField("rateselector", 0, 2),
        XBitField("rate", 0, 6),
        XBitField("packetlifetimeselector", 0, 2),
        XBitField("packetlifetime", 0, 6),
        XByteField("preference", 0),
        Reserved("_r1", 6),
    ]


class MCMemberRecord(Attr):
    """MCMemberRecord, §15.2.5.17: the MGID carries the partition's P_Key (bytes 4-5 for IPoIB)."""

    ws_name = "mcmemberrecord"
    fields_desc = [
        IP6Field("mgid", "::"),
        IP6Field("portgid", "::"),
        XIntField("q_key", 0),
        XShortField("mlid", 0),
        XBitField("mtuselector", 0, 2),
        XBitField("mtu", 0, 6),
        XByteField("tclass", 0),
        XShortField("p_key", 0xFFFF),
        XBitField("rateselector", 0, 2),
        XBitField("rate", 0, 6),
        XBitField("packetlifetimeselector", 0, 2),
        XBitField("packetlifetime", 0, 6),
        XBitField("sl", 0, 4),
        XBitField("flowlabel", 0, 20),
        XByteField("hoplimit", 0),
        XBitField("scope", 0, 4),
        XBitField("joinstate", 0, 4),
        BitField("proxyjoin", 0, 1),
        BitField("_r", 0, 23),
    ]

    def mgid_pkey(self):
        """P_Key embedded in an IPoIB MGID (ff1x:401b:PPPP::, RFC 4391 §4)."""
        import ipaddress

        return int.from_bytes(ipaddress.IPv6Address(self.mgid).packed[4:6], "big")


class MultiPathRecord(Attr):
    """MultiPathRecord, §15.2.5.20: header then SGIDCount + DGIDCount GIDs."""

    ws_name = "multipathrecord"
    fields_desc = [
        BitField("rawtraffic", 0, 1),
        BitField("_r0", 0, 3),
        XBitField("flowlabel", 0, 20),
        XByteField("hoplimit", 0),
        XByteField("tclass", 0),
        BitField("reversible", 0, 1),
        XBitField("numbpath", 0, 7),
        XShortField("p_key", 0xFFFF),
        XBitField("qosclass", 0, 12),
        XBitField("sl", 0, 4),
        XBitField("mtuselector", 0, 2),
        XBitField("mtu", 0, 6),
        XBitField("rateselector", 0, 2),
        XBitField("rate", 0, 6),
        XBitField("packetlifetimeselector", 0, 2),
        XBitField("packetlifetime", 0, 6),
        XByteField("serviceid8msb", 0),
        XBitField("independenceselector", 0, 2),
        XBitField("gidscope", 0, 6),
        XByteField("sgidcount", 0),
        XByteField("dgidcount", 0),
        XBitField("serviceid56lsb", 0, 56),
        FieldListField(
            "sdgid", [], IP6Field("", "::"), count_from=lambda p: min((p.sgidcount or 0) + (p.dgidcount or 0), 9)
        ),
    ]


class InformInfoRecord(Attr):
    ws_name = "informinforecord"
    fields_desc = [
        IP6Field("subscribergid", "::"),
        XShortField("enum", 0),
        Reserved("_r", 6),
        _pf("informinfo", InformInfo),
    ]
