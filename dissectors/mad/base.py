"""Building blocks shared by every MAD layer: tolerant dissection, zero-width mirror fields, a layer
registry for the attribute table, and the Wireshark-style flattening of a decoded MAD.

Conventions (see the project brief): each layer has `ws_name`; a field's key is
`f"{ws_name}.{field}"` unless the class dict `ws_alias` maps it; names starting with `_` are hidden;
fields holding packets (PacketField / PacketListField) are flattened with the inner layer's names;
`ws_bits` names the bits of a flag word (`portinfo.capabilitymask.issm`), shown 0/1 like Wireshark.
"""

from scapy.fields import ConditionalField, Field, StrFixedLenField
from scapy.packet import Packet

from dissectors.base import Tolerant

REGISTRY = {}


class MadPacket(Tolerant):
    """A MAD layer: tolerant of short input (dissectors.base.Tolerant), registered for the attribute table."""

    ws_name = ""
    ws_alias = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        REGISTRY[cls.__name__] = cls


class Attr(MadPacket):
    """An attribute or record of fixed layout: whatever follows its fields is padding, not payload."""

    def extract_padding(self, s):
        return b"", s


class Entry(Packet):
    """One element of a list field (a P_Key, an SL-to-VL pair …) or a fixed block inside a message: what
    follows its fields is the next element's, not its payload."""

    def extract_padding(self, s):
        return b"", s


class MirrorField(Field):
    """Zero-width field showing bits that live in an earlier layer (set in post_dissect)."""

    def __init__(self, name, default=None):
        Field.__init__(self, name, default, fmt="B")

    def getfield(self, pkt, s):
        return s, pkt.fields.get(self.name)

    def addfield(self, pkt, s, val):
        return s

    def i2len(self, pkt, x):
        return 0


def Reserved(name, length):
    """Reserved bytes, hidden from the field map."""
    return StrFixedLenField(name, b"\0" * length, length)


def _walk(p, out):
    ws = getattr(type(p), "ws_name", "")
    if not ws:
        return
    alias = getattr(type(p), "ws_alias", {})
    for f in p.fields_desc:
        if f.name.startswith("_") or f.name not in p.fields and f.name not in p.default_fields:
            continue
        if isinstance(f, ConditionalField) and not f._evalcond(p):  # absent from this packet (RMPP by type)
            continue
        v = p.getfieldval(f.name)
        if v is None:
            continue
        if isinstance(v, Packet):
            _walk(v, out)
            continue
        if isinstance(v, list) and v and isinstance(v[0], Packet):
            for x in v:
                _walk(x, out)
            continue
        key = alias.get(f.name, f"{ws}.{f.name}")
        _put(out, key, v)
        for bit, mask in getattr(type(p), "ws_bits", {}).get(f.name, ()):
            _put(out, f"{key}.{bit}", int(bool(v & mask)))


def _put(out, key, v):
    if key in out:
        prev = out[key]
        out[key] = (prev if isinstance(prev, list) else [prev]) + (v if isinstance(v, list) else [v])
    else:
        out[key] = v


def flat(pkt):
    """Map "layer.field" -> value (a list when a key repeats) for every MAD layer in `pkt`."""
    out = {}
    layer = pkt
    while isinstance(layer, Packet) and layer.__class__.__name__ != "NoPayload":
        _walk(layer, out)
        layer = layer.payload
    return out


class TextField(StrFixedLenField):
    """Fixed-length text padded with NULs (NodeDescription, IBA §14.2.5.2): shown as text."""

    def m2i(self, pkt, x):
        return x.split(b"\0", 1)[0].decode("utf-8", "replace")

    def i2m(self, pkt, x):
        raw = (x or "").encode("utf-8") if isinstance(x, str) else (x or b"")
        return raw[: self.length_from(pkt)].ljust(self.length_from(pkt), b"\0")
