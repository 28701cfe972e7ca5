"""MAD common header (IBA Vol 1 §13.4.3) and the attributes every GMP class shares: ClassPortInfo
(§13.4.8.1) and InformInfo (§13.4.8.3); opensm ib_types.h ib_mad_t / ib_class_port_info_t."""

from scapy.fields import (
    BitField,
    ByteField,
    IP6Field,
    ThreeBytesField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import Raw

from dissectors.mad import table
from dissectors.mad.base import Attr, MadPacket, MirrorField, Reserved

MAD_SIZE = 256


class MAD(MadPacket):
    """The 24-byte common MAD header; class layers are bound on `mgmtclass`."""

    ws_name = "mad"
    fields_desc = [
        XByteField("baseversion", 1),
        XByteField("mgmtclass", 0x01),
        XByteField("classversion", 1),
        XByteField("method", 0x01),
        XShortField("status", 0),
        XShortField("classspecific", 0),
        XLongField("transactionid", 0),
        XShortField("attributeid", 0),
        Reserved("_reserved", 2),
        XIntField("attributemodifier", 0),
        MirrorField("data"),
    ]

    def post_dissect(self, s):
        """`mad.data`: the 232 bytes after the common header, as Wireshark shows them."""
        if self.truncated is None:
            self.fields["data"] = bytes(s[: MAD_SIZE - 24])
        return s

    def mysummary(self):
        return table.summary(self.mgmtclass, self.method, self.attributeid)

    def post_build(self, p, pay):
        # Directed-route SMP fields shown in the SMP layer live in status / class-specific bytes.
        if pay and hasattr(self.payload, "into_mad_header"):
            p = self.payload.into_mad_header(p)
        return p + pay


def mad_of(layer):
    """The MAD common header below `layer` (None when the layer was built standalone)."""
    while layer is not None and not isinstance(layer, MAD):
        layer = layer.underlayer
    return layer


class ClassData(MadPacket):
    """Base for class headers whose payload is the attribute named by MAD.attributeid."""

    def guess_payload_class(self, payload):
        if self.truncated:
            return Raw
        mad = mad_of(self)
        if mad is None:
            return Raw
        layer = table.attribute(mad.mgmtclass, mad.attributeid)[1]
        return layer or Raw


class ClassPortInfo(Attr):
    """ClassPortInfo, IBA §13.4.8.1 (72 bytes)."""

    ws_name = "classportinfo"
    fields_desc = [
        XByteField("baseversion", 1),
        XByteField("classversion", 1),
        XShortField("capabilitymask", 0),
        XBitField("capabilitymask2", 0, 27),
        XBitField("resptimevalue", 0, 5),
        IP6Field("redirectgid", "::"),
        XBitField("redirecttc", 0, 8),
        XBitField("redirectsl", 0, 4),
        XBitField("redirectfl", 0, 20),
        XShortField("redirectlid", 0),
        XShortField("redirectpkey", 0),
        XByteField("reserved", 0),
        ThreeBytesField("redirectqp", 0),
        XIntField("redirectqkey", 0),
        IP6Field("trapgid", "::"),
        XBitField("traptc", 0, 8),
        XBitField("trapsl", 0, 4),
        XBitField("trapfl", 0, 20),
        XShortField("traplid", 0),
        XShortField("trappkey", 0),
        ByteField("traphoplimit", 0),
        ThreeBytesField("trapqp", 0),
        XIntField("trapqkey", 0),
    ]


class InformInfo(Attr):
    """InformInfo, IBA §13.4.8.3 (36 bytes): subscription to traps by the SA."""

    ws_name = "informinfo"
    fields_desc = [
        IP6Field("gid", "::"),
        XShortField("lidrangebegin", 0),
        XShortField("lidrangeend", 0),
        Reserved("_reserved", 2),
        XByteField("isgeneric", 1),
        XByteField("subscribe", 1),
        XShortField("type", 0),
        XShortField("trapnumberdeviceid", 0),
        ThreeBytesField("qpn", 0),
        BitField("_res2", 0, 3),
        XBitField("resptimevalue", 0, 5),
        Reserved("_reserved3", 1),
        ThreeBytesField("producertypevendorid", 0),
    ]
