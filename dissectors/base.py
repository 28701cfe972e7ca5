"""Conventions shared by every ibwire layer.

A layer's `ws_name` is its Wireshark display-filter prefix without `infiniband.` (`bth`, `reth`,
`mad`); its scapy field names are the Wireshark field suffixes, so `f"{ws_name}.{field}"` is the key
users already type in Wireshark.  `ws_alias` maps a scapy field to a different full key where
Wireshark's naming is irregular; fields starting with `_` are internal.  `ws_extra()` returns derived
fields Wireshark lacks (membership bit, AETH kind …) in the same style.
"""

from scapy.packet import Packet


class IBLayer(Packet):
    """Base class: no behaviour of its own beyond the naming convention."""

    ws_name = ""
    ws_alias = {}

    def ws_extra(self) -> dict:
        return {}

    def extract_padding(self, s):
        return s, b""
