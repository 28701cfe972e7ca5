"""Conventions shared by every ibwire layer.

A layer's `ws_name` is its Wireshark display-filter prefix without `infiniband.` (`bth`, `reth`,
`mad`); its scapy field names are the Wireshark field suffixes, so `f"{ws_name}.{field}"` is the key
users already type in Wireshark.  `ws_alias` maps a scapy field to a different full key where
Wireshark's naming is irregular; fields starting with `_` are internal.  `ws_extra()` returns derived
fields Wireshark lacks (membership bit, AETH kind …) in the same style.

Every layer dissects what is there: a header whose bytes end early keeps the fields that fit, names the
first that did not in `truncated`, and hands the rest on as Raw (whether that is a capture cut short or
a malformed packet is the frame's to say: ibwire.decode.frame).
"""

from scapy.packet import Packet, Raw


class Tolerant(Packet):
    """A layer that never raises on short input: fields that do not fit stay unset, the rest is Raw."""

    truncated = None  # name of the first field that did not fit, if any

    def do_dissect(self, s):
        raw = s
        self.raw_packet_cache_fields = {}
        for f in self.fields_desc:
            try:
                rest, val = f.getfield(self, s)
            except Exception:
                self.truncated = f.name
                self.raw_packet_cache = None
                return s
            s = rest
            if f.isconditional and val is None:
                continue
            if (f.islist or f.holds_packets or f.ismutable) and val is not None:
                self.raw_packet_cache_fields[f.name] = self._raw_packet_cache_field_value(f, val, copy=True)
            self.fields[f.name] = val
        self.raw_packet_cache = raw[: -len(s)] if s else raw
        self.explicit = 1
        return s

    def guess_payload_class(self, payload):
        if self.truncated:
            return Raw
        return super().guess_payload_class(payload)


class IBLayer(Tolerant):
    """Base class of the transport headers: tolerant dissection and the naming convention."""

    ws_name = ""
    ws_alias = {}

    def ws_extra(self) -> dict:
        return {}

    def extract_padding(self, s):
        return s, b""
