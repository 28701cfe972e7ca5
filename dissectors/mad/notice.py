"""Notice attribute and trap data details (IBA Vol 1 §13.4.8.2, §14.2.5.1 Table 131-ish, §14.3.11;
opensm ib_types.h ib_mad_notice_attr_t ntc_64_67 ... ntc_259)."""

from scapy.fields import (
    BitField,
    IP6Field,
    StrFixedLenField,
    ThreeBytesField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)

from dissectors.mad.base import Attr, MirrorField, Reserved


class TrapGID(Attr):
    """Traps 64-67: a GID in/out of service, multicast group created/deleted."""

    ws_name = "trap"
    fields_desc = [Reserved("_r", 6), IP6Field("gidaddr", "::")]


class TrapPaths(Attr):
    """Traps 68/69: paths no longer valid / valid again."""

    ws_name = "trap"
    fields_desc = [XLongField("comp_mask", 0), BitField("wait_for_repath", 0, 1), BitField("_r", 0, 7)]


class TrapLinkState(Attr):
    """Trap 128: link state change on a switch."""

    ws_name = "trap"
    fields_desc = [XShortField("lidaddr", 0)]


class TrapPort(Attr):
    """Traps 129-131: link integrity / buffer overrun / flow-control watchdog on a port."""

    ws_name = "trap"
    fields_desc = [Reserved("_r", 2), XShortField("lidaddr", 0), XByteField("portno", 0)]


class TrapLocalChanges(Attr):
    """Trap 144: capability mask or other local changes."""

    ws_name = "trap"
    ws_alias = {"linkspeedenabledchange": "trap.linkspeecenabledchange"}
    fields_desc = [
        Reserved("_r", 2),
        XShortField("lidaddr", 0),
        Reserved("_r2", 1),
        BitField("_r3", 0, 7),
        BitField("otherlocalchanges", 0, 1),
        XIntField("capabilitymask", 0),
        Reserved("_r4", 1),
        BitField("_r5", 0, 5),
        BitField("linkspeedenabledchange", 0, 1),
        BitField("linkwidthenabledchange", 0, 1),
        BitField("nodedescriptionchange", 0, 1),
    ]


class TrapSysImageGUID(Attr):
    """Trap 145: system image GUID changed."""

    ws_name = "trap"
    fields_desc = [Reserved("_r", 2), XShortField("lidaddr", 0), Reserved("_r2", 2), XLongField("systemimageguid", 0)]


class TrapBadMKey(Attr):
    """Trap 256: bad M_Key, with the offending SMP's method, attribute and directed-route path."""

    ws_name = "trap"
    fields_desc = [
        Reserved("_r", 2),
        XShortField("lidaddr", 0),
        XShortField("drslid", 0),
        XByteField("method", 0),
        Reserved("_r2", 1),
        XShortField("attributeid", 0),
        XIntField("attributemodifier", 0),
        XLongField("mkey", 0),
        Reserved("_r3", 1),
        BitField("drnotice", 0, 1),
        BitField("drpathtruncated", 0, 1),
        XBitField("drhopcount", 0, 6),
        StrFixedLenField("drnoticereturnpath", b"\0" * 30, 30),
    ]


class TrapBadKey(Attr):
    """Traps 257/258: bad P_Key / bad Q_Key between two end ports."""

    ws_name = "trap"
    fields_desc = [
        Reserved("_r", 2),
        XShortField("lidaddr1", 0),
        XShortField("lidaddr2", 0),
        XIntField("key", 0),
        XBitField("sl", 0, 4),
        BitField("_r2", 0, 4),
        ThreeBytesField("qp1", 0),
        Reserved("_r3", 1),
        ThreeBytesField("qp2", 0),
        IP6Field("gidaddr1", "::"),
        IP6Field("gidaddr2", "::"),
    ]


class TrapBadPKeySwitch(Attr):
    """Trap 259: bad P_Key at a switch external port (partition enforcement)."""

    ws_name = "trap"
    fields_desc = [
        XShortField("datavalid", 0),
        XShortField("lidaddr1", 0),
        XShortField("lidaddr2", 0),
        XShortField("pkey", 0),
        XBitField("sl", 0, 4),
        BitField("_r2", 0, 4),
        ThreeBytesField("qp1", 0),
        Reserved("_r3", 1),
        ThreeBytesField("qp2", 0),
        IP6Field("gidaddr1", "::"),
        IP6Field("gidaddr2", "::"),
        XShortField("swlidaddr", 0),
        XByteField("portno", 0),
    ]


TRAP_LAYERS = {
    64: TrapGID,
    65: TrapGID,
    66: TrapGID,
    67: TrapGID,
    68: TrapPaths,
    69: TrapPaths,
    128: TrapLinkState,
    129: TrapPort,
    130: TrapPort,
    131: TrapPort,
    144: TrapLocalChanges,
    145: TrapSysImageGUID,
    256: TrapBadMKey,
    257: TrapBadKey,
    258: TrapBadKey,
    259: TrapBadPKeySwitch,
}


class Notice(Attr):
    """Notice (64 bytes in an SMP; GMP notices add the 16-byte IssuerGID)."""

    ws_name = "notice"
    fields_desc = [
        BitField("isgeneric", 1, 1),
        XBitField("type", 0, 7),
        ThreeBytesField("producertypevendorid", 0),
        XShortField("trapnumberdeviceid", 0),
        XShortField("issuerlid", 0),
        BitField("noticetoggle", 0, 1),
        XBitField("noticecount", 0, 15),
        StrFixedLenField("datadetails", b"\0" * 54, 54),
        MirrorField("trap"),
    ]

    def post_dissect(self, s):
        if self.truncated is None and self.isgeneric:
            cls = TRAP_LAYERS.get(self.trapnumberdeviceid)
            if cls is not None:
                self.fields["trap"] = cls(self.datadetails)
        return s

    def post_build(self, p, pay):
        trap = self.fields.get("trap")
        if trap is not None and "datadetails" not in self.fields:
            p = p[:10] + bytes(trap).ljust(54, b"\0")[:54] + p[64:]
        return p + pay
