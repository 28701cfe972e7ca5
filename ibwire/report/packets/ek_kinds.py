"""What tshark 4.0's -T ek writes of a field by its kind (epan/print.c, ek_write_name and ek_write_field_value),
where -T json writes a text: a boolean as true/false, a field without a value (FT_NONE) as null, a protocol's
node as an object of its own items (`_ws.expert`), and a field registered as a protocol of its own (a TCP
option, `tcp.options.nop`) under its own name, without its layer's prefix."""

from ibwire.report.packets.nvme_data_words import Titled

OBJECTS = ("_ws.expert",)  # FT_PROTOCOL nodes inside a layer
CARRIED = ("ip", "ipv6", "udp", "tcp", "icmp", "icmpv6", "data")  # protocols an ICMP error carries: objects too
PROTOCOLS = ("_ws.expert", "_ws.malformed")  # protocols whose fields sit in other layers
OWN_NAMES = frozenset(  # packet-tcp.c registers each option as a protocol (of FT_BYTES)
    f"tcp.options.{name}" for name in ("eol", "nop", "mss", "wscale", "sack_perm", "sack", "timestamp")
)


class Flag(Titled):
    """An FT_BOOLEAN's "1"/"0", true/false in -T ek."""


class Empty(Titled):
    """An FT_NONE's "", null in -T ek."""


def flag(on, title: str) -> Flag:
    out = Flag("1" if on else "0")
    out.title = title
    return out


def empty(title: str) -> Empty:
    out = Empty("")
    out.title = title
    return out


def ek_name(layer: str, key: str) -> str:
    """A field's -T ek key: its protocol's name and its own, dots as underscores (a protocol's own name alone)."""
    if key in OWN_NAMES or key in OBJECTS:
        return key.replace(".", "_")
    proto = next((p for p in PROTOCOLS if key.startswith(p + ".")), layer)
    return f"{proto}_{key}".replace(".", "_")


def is_field(key: str) -> bool:
    """A subtree's key that names a field (FT_NONE: `tcp.analysis`), not a text label (`Timestamps`)."""
    return "." in key and " " not in key
