"""Classes decoded by header only (IBA Vol 1 §13.4.3-13.4.4): vendor classes 0x09-0x0F (no OUI) and
0x30-0x4F (RMPP header, OUI), baseboard management (0x05, §16.2: B_Key), device management (0x06,
§16.3), SNMP tunnelling (0x08, §16.4) and application classes (0x10-0x2F)."""

from scapy.fields import ThreeBytesField, XLongField
from scapy.packet import Raw, bind_layers

from dissectors.mad.base import MadPacket, Reserved
from dissectors.mad.common import MAD
from dissectors.mad.sa import RMPP


class _OpaqueData(MadPacket):
    """A header after which the class's data is opaque bytes."""

    def guess_payload_class(self, payload):
        return Raw


class VendorOUI(_OpaqueData):
    """Vendor class range 2 after its RMPP header: one reserved byte and the vendor's OUI."""

    ws_name = "vendor"
    fields_desc = [Reserved("_reserved", 1), ThreeBytesField("oui", 0)]


class BM(_OpaqueData):
    """Baseboard management header: B_Key and 32 reserved bytes before 192 data bytes."""

    ws_name = "bm"
    fields_desc = [XLongField("b_key", 0), Reserved("_reserved", 32)]


class DevMgt(_OpaqueData):
    """Device management header: 40 reserved bytes before 192 data bytes."""

    ws_name = "devmgt"
    fields_desc = [Reserved("_reserved", 40)]


class _RMPPVendor(RMPP):
    """RMPP header of vendor range 2; followed by the OUI."""

    name = "RMPP"

    def guess_payload_class(self, payload):
        return VendorOUI if not self.truncated else Raw


for _c in range(0x30, 0x50):
    bind_layers(MAD, _RMPPVendor, mgmtclass=_c)
bind_layers(MAD, BM, mgmtclass=0x05)
bind_layers(MAD, DevMgt, mgmtclass=0x06)
