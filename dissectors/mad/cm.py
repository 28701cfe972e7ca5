"""Communication management (class 0x07, IBA Vol 1 §12.6): the 232-byte message follows the MAD header.
RDMA-CM IP addressing (Annex A11.2-A11.4): a REQ whose ServiceID is 0x0000000001PPDDDD carries the
IP CM private data (versions, IP version, source port, source/destination IP)."""

from scapy.fields import (
    BitField,
    ConditionalField,
    IP6Field,
    IPField,
    PacketField,
    StrFixedLenField,
    ThreeBytesField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import bind_layers

from dissectors.mad import table
from dissectors.mad.base import Attr, Entry, MirrorField, Reserved
from dissectors.mad.common import MAD, ClassData, ClassPortInfo


class CM(ClassData):
    """Communication management: no class header, the message starts at MAD byte 24."""

    ws_name = "cm"
    fields_desc = []


bind_layers(MAD, CM, mgmtclass=0x07)


class IPCMPrivate(Entry):
    """IP CM private data of a REQ (Annex A11.4, 92 bytes: 36 header + 56 consumer bytes)."""

    ws_name = "cm.req.ip_cm"
    fields_desc = [
        XBitField("majv", 0, 4),
        XBitField("minv", 0, 4),
        XBitField("ipv", 4, 4),
        XBitField("reserved", 0, 4),
        XShortField("sport", 0),
        ConditionalField(Reserved("_sip_pad", 12), lambda p: p.ipv == 4),
        ConditionalField(IPField("sip4", "0.0.0.0"), lambda p: p.ipv == 4),
        ConditionalField(Reserved("_dip_pad", 12), lambda p: p.ipv == 4),
        ConditionalField(IPField("dip4", "0.0.0.0"), lambda p: p.ipv == 4),
        ConditionalField(IP6Field("sip6", "::"), lambda p: p.ipv != 4),
        ConditionalField(IP6Field("dip6", "::"), lambda p: p.ipv != 4),
        StrFixedLenField("private", b"\0" * 56, 56),
    ]


def _ip_cm(p):
    return (p.serviceid or 0) & table.RDMA_IP_CM_SID_MASK == table.RDMA_IP_CM_SID_PREFIX


def _path(which):
    """One path of a REQ, §12.6.5: the primary (`prim_…`) and the alternate (`alt_…`) have this layout."""
    return [
        XShortField(f"{which}_locallid", 0),
        XShortField(f"{which}_remotelid", 0),
        IP6Field(f"{which}_localgid", "::"),
        IP6Field(f"{which}_remotegid", "::"),
        XBitField(f"{which}_flowlabel", 0, 20),
        XBitField(f"{which}_reserved0", 0, 6),
        XBitField(f"{which}_pktrate", 0, 6),
        XByteField(f"{which}_tfcclass", 0),
        XByteField(f"{which}_hoplim", 0),
        XBitField(f"{which}_sl", 0, 4),
        BitField(f"{which}_subnetlocal", 0, 1),
        XBitField(f"{which}_reserved1", 0, 3),
        XBitField(f"{which}_localacktout", 0, 5),
        XBitField(f"{which}_reserved2", 0, 3),
    ]


class CMReq(Attr):
    """ConnectRequest (REQ), §12.6.5."""

    name = "CM REQ"
    ws_name = "cm.req"
    ws_alias = {
        "localcommid": "cm.req",
        "prefix": "cm.req.serviceid.prefix",
        "protocol": "cm.req.serviceid.protocol",
        "dport": "cm.req.serviceid.dport",
        "alt_reserved2": "cm.req.alt_reserved1",
    }  # Wireshark names both alt_reserved1
    fields_desc = [
        XIntField("localcommid", 0),
        Reserved("_r0", 4),
        XLongField("serviceid", 0),
        MirrorField("prefix"),
        MirrorField("protocol"),
        MirrorField("dport"),
        XLongField("localcaguid", 0),
        Reserved("_r1", 4),
        XIntField("localqkey", 0),
        ThreeBytesField("localqpn", 0),
        XByteField("responderres", 0),
        ThreeBytesField("localeecn", 0),
        XByteField("initdepth", 0),
        ThreeBytesField("remoteeecn", 0),
        XBitField("remoteresptout", 0, 5),
        XBitField("transpsvctype", 0, 2),
        BitField("e2eflowctrl", 0, 1),
        ThreeBytesField("startpsn", 0),
        XBitField("localresptout", 0, 5),
        XBitField("retrcount", 0, 3),
        XShortField("pkey", 0xFFFF),
        XBitField("pppmtu", 0, 4),
        BitField("rdcexist", 0, 1),
        XBitField("rnrretrcount", 0, 3),
        XBitField("maxcmretr", 0, 4),
        BitField("srq", 0, 1),
        XBitField("ext_transport", 0, 3),
        *_path("prim"),
        *_path("alt"),
        ConditionalField(PacketField("ip_cm", IPCMPrivate(), IPCMPrivate), _ip_cm),
        ConditionalField(StrFixedLenField("private", b"\0" * 92, 92), lambda p: not _ip_cm(p)),
    ]

    def post_dissect(self, s):
        if self.truncated is None and _ip_cm(self):
            sid = self.serviceid
            self.fields.update(prefix=(sid >> 24).to_bytes(5, "big"), protocol=(sid >> 16) & 0xFF, dport=sid & 0xFFFF)
        return s


class CMMra(Attr):
    """MessageReceiptAcknowledgement (MRA), §12.6.6."""

    name = "CM MRA"
    ws_name = "cm.mra"
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        XBitField("msgmraed", 0, 2),
        BitField("_r0", 0, 6),
        XBitField("servicetimeout", 0, 5),
        BitField("_r1", 0, 3),
        StrFixedLenField("private", b"\0" * 222, 222),
    ]


class CMRej(Attr):
    """ConnectReject (REJ), §12.6.7; `reason` codes in table.CM_REJ_REASONS."""

    name = "CM REJ"
    ws_name = "cm.rej"
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        XBitField("msgrej", 0, 2),
        XBitField("reserved0", 0, 6),
        XBitField("rejinfolen", 0, 7),
        XBitField("reserved1", 0, 1),
        XShortField("reason", 0),
        StrFixedLenField("ari", b"\0" * 72, 72),
        StrFixedLenField("private", b"\0" * 148, 148),
    ]

    def reason_text(self):
        return table.CM_REJ_REASONS.get(self.reason, f"reason {self.reason}")


class CMRep(Attr):
    """ConnectReply (REP), §12.6.8."""

    name = "CM REP"
    ws_name = "cm.rep"
    ws_alias = {"localcommid": "cm.rep"}
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        XIntField("localqkey", 0),
        ThreeBytesField("localqpn", 0),
        Reserved("_r0", 1),
        ThreeBytesField("localeecn", 0),
        Reserved("_r1", 1),
        ThreeBytesField("startpsn", 0),
        Reserved("_r2", 1),
        XByteField("respres", 0),
        XByteField("initdepth", 0),
        XBitField("tgtackdelay", 0, 5),
        XBitField("failoveracc", 0, 2),
        BitField("e2eflowctrl", 0, 1),
        XBitField("rnrretrcount", 0, 3),
        BitField("srq", 0, 1),
        XBitField("reserved", 0, 4),
        XLongField("localcaguid", 0),
        StrFixedLenField("private", b"\0" * 196, 196),
    ]


class CMRtu(Attr):
    """ReadyToUse (RTU), §12.6.9."""

    name = "CM RTU"
    ws_name = "cm.rtu"
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        StrFixedLenField("private", b"\0" * 224, 224),
    ]


class CMDreq(Attr):
    """DisconnectRequest (DREQ), §12.6.10."""

    name = "CM DREQ"
    ws_name = "cm.dreq"
    ws_alias = {"remoteqpn": "cm.req.remoteqpneecn"}
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        ThreeBytesField("remoteqpn", 0),
        Reserved("_r0", 1),
        StrFixedLenField("private", b"\0" * 220, 220),
    ]


class CMDrep(Attr):
    """DisconnectReply (DREP), §12.6.11 (Wireshark calls it cm.drsp)."""

    name = "CM DREP"
    ws_name = "cm.drsp"
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        StrFixedLenField("private", b"\0" * 224, 224),
    ]


class CMSidrReq(Attr):
    """ServiceIDResolutionRequest (SIDR_REQ), §12.11.1."""

    name = "CM SIDR_REQ"
    ws_name = "cm.sidr_req"
    fields_desc = [
        XIntField("requestid", 0),
        XShortField("pkey", 0xFFFF),
        Reserved("_r0", 2),
        XLongField("serviceid", 0),
        StrFixedLenField("private", b"\0" * 216, 216),
    ]


class CMSidrRep(Attr):
    """ServiceIDResolutionResponse (SIDR_REP), §12.11.2."""

    name = "CM SIDR_REP"
    ws_name = "cm.sidr_rep"
    fields_desc = [
        XIntField("requestid", 0),
        XByteField("status", 0),
        XByteField("addinfolen", 0),
        Reserved("_r0", 2),
        ThreeBytesField("qpn", 0),
        Reserved("_r1", 1),
        XLongField("serviceid", 0),
        XIntField("qkey", 0),
        PacketField("classportinfo", ClassPortInfo(), ClassPortInfo),
        StrFixedLenField("private", b"\0" * 136, 136),
    ]


class CMLap(Attr):
    """LoadAlternatePath (LAP), §12.8.1."""

    name = "CM LAP"
    ws_name = "cm.lap"
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        Reserved("_r0", 4),
        ThreeBytesField("remoteqpn", 0),
        XBitField("remotecmresptout", 0, 5),
        BitField("_r1", 0, 3),
        Reserved("_r2", 4),
        XShortField("alt_locallid", 0),
        XShortField("alt_remotelid", 0),
        IP6Field("alt_localgid", "::"),
        IP6Field("alt_remotegid", "::"),
        XBitField("alt_flowlabel", 0, 20),
        BitField("_r3", 0, 4),
        XByteField("alt_tfcclass", 0),
        XByteField("alt_hoplim", 0),
        BitField("_r4", 0, 2),
        XBitField("alt_pktrate", 0, 6),
        XBitField("alt_sl", 0, 4),
        BitField("alt_subnetlocal", 0, 1),
        BitField("_r5", 0, 3),
        XBitField("alt_localacktout", 0, 5),
        BitField("_r6", 0, 3),
        StrFixedLenField("private", b"\0" * 168, 168),
    ]


class CMApr(Attr):
    """AlternatePathResponse (APR), §12.8.2."""

    name = "CM APR"
    ws_name = "cm.apr"
    fields_desc = [
        XIntField("localcommid", 0),
        XIntField("remotecommid", 0),
        XByteField("addinfolen", 0),
        XByteField("apstatus", 0),
        Reserved("_r0", 2),
        StrFixedLenField("addinfo", b"\0" * 72, 72),
        StrFixedLenField("private", b"\0" * 148, 148),
    ]
