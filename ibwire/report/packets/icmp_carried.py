"""The datagram an ICMP or ICMPv6 error carries, as tshark 4.0 shows it (packet-icmp.c, packet-icmpv6.c: the IP
dissector run on the bytes after the second word, in an error packet): its IP or IPv6 header and the header
above it inside the ICMP layer, each as far as the captured bytes go (a cut header ends where its bytes end,
silently); what follows a UDP header (`Data`, a RoCEv2 packet's InfiniBand layer) after the ICMP layer, where
tshark places it.  A TCP header is tshark's error-packet TCP (tcp_error_doc; cut before 20 bytes: its ports and
sequence number); IP options and IPv6 extension headers end the datagram (not yet).
"""

from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6

from ibwire.report.packets.tcp_error_doc import error_title
from ibwire.report.packets.tcp_options import expert, line
from ibwire.report.packets.values import bytes_text

# The bytes of the header each item of tshark_doc._ip / _ipv6 needs (tshark stops at the first it lacks)
NEEDS = {
    "ip": (1, 1, 2, 2, 4, 6, 7, 7, 8, 9, 10, 12, 12, 16, 16, 16, 16, 20, 20, 20, 20),
    "ipv6": (1, 1, 2, 2, 4, 6, 7, 8, 24, 24, 24, 24, 40, 40, 40, 40),
}
UDP, TCP, ICMP, ICMPV6, OSPF, PIM = 17, 6, 1, 58, 89, 103
SHORT_IPV6 = (
    "_ws.expert",
    [
        ("ipv6.invalid_header", line("", "[IPv6 header must be exactly 40 bytes]")),
        ("_ws.expert.message", "IPv6 header must be exactly 40 bytes"),
        ("_ws.expert.severity", line("8388608", "[Severity level: Error]")),
        ("_ws.expert.group", line("117440512", "[Group: Malformed]")),
    ],
)
TITLES = {"icmp": "Internet Control Message Protocol", "icmpv6": "Internet Control Message Protocol v6"}


class Node(list):
    """A text item's children (or a protocol's inside another), with its -V title."""

    def __init__(self, title: str, items: list):
        super().__init__(items)
        self.title = title


def carried(inner: bytes, walk, version: int) -> tuple:
    """(items the ICMP layer ends with, layers after it) of the carried datagram `inner` (its bytes as far as
    tshark takes them), through `walk` (a scapy packet -> its tshark layers, tshark_doc's walk of a frame);
    `version`: 4 under ICMP, 6 under ICMPv6."""
    name = "ip" if version == 4 else "ipv6"
    hlen = (inner[0] & 15) * 4 if version == 4 and inner else 40
    if walk is None or not inner or inner[0] >> 4 != version or hlen != (20 if version == 4 else 40):
        return [], []
    head = (IP if version == 4 else IPv6)(inner.ljust(hlen, b"\0"))
    proto = head.proto if version == 4 else head.nh
    fragment = version == 4 and (int(head.flags) & 1 or head.frag)
    whole = len(inner) >= hlen + 8 and proto in (UDP, ICMP if version == 4 else ICMPV6) and not fragment
    whole = whole or (proto == TCP and len(inner) >= hlen + 20 and not fragment)  # (a TCP header: all of it)
    packet = (IP if version == 4 else IPv6)(inner) if whole else head
    packet.in_error = True  # (icmp_doc: a message inside an error is not matched nor verified)
    layers = walk(packet)
    items = [item for item, need in zip(layers[0][1], NEEDS[name]) if need <= len(inner)]
    if version == 4 and len(inner) >= 20:
        items = _ttl_expert(items, head)
    if version == 6 and len(inner) < 40:  # packet-ipv6.c's verdict, under the version
        items = items[:2] + [SHORT_IPV6, ("_ws.malformed", "Malformed Packet")] + items[2:]
    out = [(name, Node(_ip_title(version, items), items))]
    body = inner[hlen:]
    if not body:
        return out, []
    if fragment or proto not in (UDP, TCP, ICMP, ICMPV6):
        end = head.len - hlen if version == 4 else head.plen
        data = body[: max(end, 0)]
        return out + ([("data", [("data.data", bytes_text(data)), ("data.len", str(len(data)))])] if data else []), []
    if whole:
        first, after = layers[1] if len(layers) > 1 else (None, []), layers[2:]
        if first[0] == "udp":
            udp = [item for item in first[1] if item[0] != "Timestamps"]  # (tshark: no times in an error)
            return out + [("udp", Node(_udp_title(udp), udp))], after
        if first[0] == "tcp":  # (what follows is its payload, inside it)
            return out + [("tcp", Node(error_title(first[1]), first[1]))], []
        return out + ([(first[0], Node(TITLES[first[0]], first[1]))] if first[0] in TITLES else []), after
    return out + _ports(body, proto), []


def _ttl_expert(items: list, head) -> list:
    """packet-ip.c's note of a TTL below 5 (not sent to a multicast group, nor PIM or OSPF), under the TTL."""
    multicast = 224 <= int(head.dst.split(".")[0]) < 240
    if head.ttl >= 5 or multicast or head.proto in (OSPF, PIM):
        return items
    at = next(i for i, (key, _) in enumerate(items) if key == "ip.ttl") + 1
    note = expert("ip.ttl.too_small", f'"Time To Live" only {head.ttl}', "Note")
    return items[:at] + [("ip.ttl_tree", [note])] + items[at:]


def _ip_title(version: int, items: list) -> str:
    got = dict(items)
    title = f"Internet Protocol Version {version}"
    key = "ip" if version == 4 else "ipv6"
    for side, label in (("src", "Src"), ("dst", "Dst")):
        if f"{key}.{side}" in got:
            title += f", {label}: {got[f'{key}.{side}']}"
    return title


def _udp_title(items: list) -> str:
    got = dict(items)
    return f"User Datagram Protocol, Src Port: {got.get('udp.srcport')}, Dst Port: {got.get('udp.dstport')}"


def _ports(body: bytes, proto: int) -> list:
    """A UDP or TCP header cut by the capture: its ports (both, or none), a UDP length, a TCP sequence number
    (tshark's title names it only in a header of 20 bytes or more: tcp_error_doc)."""
    if proto not in (UDP, TCP) or len(body) < 4:
        return []
    key = "udp" if proto == UDP else "tcp"
    sport, dport = int.from_bytes(body[0:2], "big"), int.from_bytes(body[2:4], "big")
    items = [
        (f"{key}.srcport", line(str(sport), f"Source Port: {sport}")),
        (f"{key}.dstport", line(str(dport), f"Destination Port: {dport}")),
        (f"{key}.port", str(sport)),
        (f"{key}.port", str(dport)),
    ]
    if key == "udp":
        items += [("udp.length", str(int.from_bytes(body[4:6], "big")))] if len(body) >= 6 else []
        return [("udp", Node(_udp_title(items), items))]
    if len(body) >= 8:
        seq = int.from_bytes(body[4:8], "big")
        items.append(("tcp.seq", line(str(seq), f"Sequence Number: {seq}")))
    return [("tcp", Node(f"Transmission Control Protocol, Src Port: {sport}, Dst Port: {dport}", items))]
