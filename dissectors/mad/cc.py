"""Congestion control (class 0x21, IBA Vol 1 Annex A10.4): CC_Key and 32 reserved bytes after the MAD
header, then 192 bytes of attribute data; opensm ib_types.h ib_cc_mad_t, ib_cong_info_t, ..."""

from scapy.fields import (
    BitField,
    FieldListField,
    IntField,
    PacketListField,
    ShortField,
    StrFixedLenField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import bind_layers

from dissectors.mad.base import Attr, Entry, Reserved
from dissectors.mad.common import MAD, ClassData


class CC(ClassData):
    name = "CongestionControl"
    ws_name = "cc"
    fields_desc = [XLongField("cc_key", 0), Reserved("_reserved", 32)]


bind_layers(MAD, CC, mgmtclass=0x21)


class CongestionInfo(Attr):
    """CongestionInfo, A10.4.3.3."""

    ws_name = "congestioninfo"
    fields_desc = [XShortField("congestioninfo", 0), XByteField("controltablecap", 0)]


class CongestionKeyInfo(Attr):
    """CongestionKeyInfo, A10.4.3.4."""

    ws_name = "congestionkeyinfo"
    fields_desc = [
        XLongField("cc_key", 0),
        BitField("cc_keyprotectbit", 0, 1),
        BitField("_r", 0, 15),
        ShortField("cc_keyleaseperiod", 0),
        ShortField("cc_keyviolations", 0),
    ]


class SwitchCongestionSetting(Attr):
    """SwitchCongestionSetting, A10.4.3.6."""

    ws_name = "switchcongestionsetting"
    fields_desc = [
        XIntField("controlmap", 0),
        StrFixedLenField("victimmask", b"\0" * 32, 32),
        StrFixedLenField("creditmask", b"\0" * 32, 32),
        XBitField("threshold", 0, 4),
        BitField("_r0", 0, 4),
        XByteField("packetsize", 0),
        XBitField("cs_threshold", 0, 4),
        BitField("_r1", 0, 4),
        Reserved("_r2", 1),
        ShortField("cs_returndelay", 0),
        ShortField("marking_rate", 0),
    ]


class CACongestionEntry(Entry):
    ws_name = "cacongestionsetting"
    fields_desc = [
        ShortField("ccti_timer", 0),
        XByteField("ccti_increase", 0),
        XByteField("trigger_threshold", 0),
        XByteField("ccti_min", 0),
        Reserved("_r", 1),
    ]


class CACongestionSetting(Attr):
    """CACongestionSetting, A10.4.3.8: per-SL timers and increases."""

    ws_name = "cacongestionsetting"
    fields_desc = [
        XShortField("port_control", 0),
        XShortField("control_map", 0),
        PacketListField("entries", [], CACongestionEntry, count_from=lambda p: 16),
    ]


class CongestionControlTable(Attr):
    """CongestionControlTable block, A10.4.3.9: CCTI limit and 64 (shift, multiplier) entries."""

    ws_name = "congestioncontroltable"
    fields_desc = [
        XShortField("ccti_limit", 0),
        Reserved("_r", 2),
        FieldListField("entry", [0] * 64, XShortField("", 0), count_from=lambda p: 64),
    ]


class CCTimeStamp(Attr):
    """TimeStamp, A10.4.3.10."""

    name = "TimeStamp"
    ws_name = "cctimestamp"
    fields_desc = [IntField("timestamp", 0)]
