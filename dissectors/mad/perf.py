"""Performance management (class 0x04, IBA Vol 1 §16.1): 40 reserved bytes after the MAD header, then
the attribute; layouts from §16.1.3-16.1.4 and opensm ib_types.h (ib_port_counters_t, ...)."""

from scapy.fields import (
    BitField,
    ByteField,
    FieldListField,
    IntField,
    LongField,
    ShortField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import bind_layers

from dissectors.mad.base import Attr, Reserved
from dissectors.mad.common import MAD, ClassData


class PerfMgt(ClassData):
    ws_name = "perf"
    fields_desc = [Reserved("_reserved", 40)]


bind_layers(MAD, PerfMgt, mgmtclass=0x04)

# The first four bytes of the port counter attributes (§16.1.3.5, §16.1.4): the port and the counters chosen.
PORT_SELECT = [Reserved("_r0", 1), XByteField("portselect", 0), XShortField("counterselect", 0)]


class PortSamplesControl(Attr):
    """PortSamplesControl, §16.1.3.2."""

    ws_name = "portsamplescontrol"
    fields_desc = [
        XByteField("opcode", 0),
        XByteField("portselect", 0),
        XByteField("tick", 0),
        BitField("_r0", 0, 5),
        BitField("counterwidth", 0, 3),
        BitField("_r1", 0, 2),
        XBitField("countermask0", 0, 3),
        XBitField("countermasks1to9", 0, 27),
        BitField("_r2", 0, 1),
        XBitField("countermasks10to14", 0, 15),
        XByteField("samplemechanisms", 0),
        BitField("_r3", 0, 6),
        BitField("samplestatus", 0, 2),
        XLongField("optionmask", 0),
        XLongField("vendormask", 0),
        IntField("samplestart", 0),
        IntField("sampleinterval", 0),
        XShortField("tag", 0),
        FieldListField("counterselect", [0] * 15, XShortField("", 0), count_from=lambda p: 15),
        Reserved("_r4", 4),
        XLongField("samplesonlyoptionmask", 0),
    ]


class PortSamplesResult(Attr):
    """PortSamplesResult, §16.1.3.3."""

    ws_name = "portsamplesresult"
    fields_desc = [
        XShortField("tag", 0),
        BitField("_r", 0, 14),
        BitField("samplestatus", 0, 2),
        FieldListField("counter", [0] * 15, IntField("", 0), count_from=lambda p: 15),
    ]


class PortCounters(Attr):
    """PortCounters, §16.1.3.5."""

    ws_name = "portcounters"
    fields_desc = [
        *PORT_SELECT,
        ShortField("symbolerrorcounter", 0),
        ByteField("linkerrorrecoverycounter", 0),
        ByteField("linkdownedcounter", 0),
        ShortField("portrcverrors", 0),
        ShortField("portrcvremotephysicalerrors", 0),
        ShortField("portrcvswitchrelayerrors", 0),
        ShortField("portxmitdiscards", 0),
        ByteField("portxmitconstrainterrors", 0),
        ByteField("portrcvconstrainterrors", 0),
        XByteField("counterselect2", 0),
        BitField("locallinkintegrityerrors", 0, 4),
        BitField("excessivebufferoverrunerrors", 0, 4),
        ShortField("qpn1dropped", 0),
        ShortField("vl15dropped", 0),
        IntField("portxmitdata", 0),
        IntField("portrcvdata", 0),
        IntField("portxmitpkts", 0),
        IntField("portrcvpkts", 0),
        IntField("portxmitwait", 0),
    ]


class PortCountersExtended(Attr):
    """PortCountersExtended, §16.1.4.11 (64-bit data and packet counters)."""

    ws_name = "portcounters_ext"
    fields_desc = [
        *PORT_SELECT,
        XIntField("counterselect2", 0),
        LongField("portxmitdata", 0),
        LongField("portrcvdata", 0),
        LongField("portxmitpkts", 0),
        LongField("portrcvpkts", 0),
        LongField("portunicastxmitpkts", 0),
        LongField("portunicastrcvpkts", 0),
        LongField("portmulticastxmitpkts", 0),
        LongField("portmulticastrcvpkts", 0),
    ]


class PortRcvErrorDetails(Attr):
    """PortRcvErrorDetails, §16.1.4.4."""

    ws_name = "portrcverrordetails"
    fields_desc = [
        *PORT_SELECT,
        ShortField("portlocalphysicalerrors", 0),
        ShortField("portmalformedpacketerrors", 0),
        ShortField("portbufferoverrunerrors", 0),
        ShortField("portdlidmappingerrors", 0),
        ShortField("portvlmappingerrors", 0),
        ShortField("portloopingerrors", 0),
    ]


class PortXmitDiscardDetails(Attr):
    """PortXmitDiscardDetails, §16.1.4.5."""

    ws_name = "portxmitdiscarddetails"
    fields_desc = [
        *PORT_SELECT,
        ShortField("portinactivediscards", 0),
        ShortField("portneighbormtudiscards", 0),
        ShortField("portswlifetimelimitdiscards", 0),
        ShortField("portswhoqlifetimelimitdiscards", 0),
    ]


class PortXmitDataSL(Attr):
    """PortXmitDataSL, §16.1.4.7: transmitted data per SL."""

    ws_name = "portxmitdatasl"
    fields_desc = [
        Reserved("_r0", 1),
        XByteField("portselect", 0),
        Reserved("_r1", 2),
        FieldListField("portxmitdatasl", [0] * 16, IntField("", 0), count_from=lambda p: 16),
    ]


class PortRcvDataSL(Attr):
    """PortRcvDataSL, §16.1.4.8: received data per SL."""

    ws_name = "portrcvdatasl"
    fields_desc = [
        Reserved("_r0", 1),
        XByteField("portselect", 0),
        Reserved("_r1", 2),
        FieldListField("portrcvdatasl", [0] * 16, IntField("", 0), count_from=lambda p: 16),
    ]
