"""tshark 4.0's verdicts on a length an IPv4, IPv6 or UDP header claims beyond the bytes the frame reports
(packet-ip.c's ei_ip_bogus_ip_length, packet-ipv6.c's ei_ipv6_plen_exceeds_framing, packet-udp.c's
ei_udp_length_bad): an expert item in the length's subtree, and the UDP length's -V line saying what is left.
`reported`: the bytes the frame reports from the header's start on (captured or not), as tshark's tvb holds
them.  Not yet: an IPv4 length below its header's and a UDP length below 8, after which tshark ends the layer.
"""

from typing import Optional

from ibwire.report.packets.ek_kinds import empty
from ibwire.report.packets.icmp_carried import Node
from ibwire.report.packets.tcp_options import line

SEVERITIES = {"Warning": "6291456", "Error": "8388608"}
GROUPS = {"Malformed": "117440512", "Protocol": "150994944"}


def _expert(key: str, message: str, severity: str, group: str) -> tuple:
    return (
        "_ws.expert",
        Node(
            f"[Expert Info ({severity}/{group}): {message}]",
            [
                (key, empty(f"[{message}]")),
                ("_ws.expert.message", message),
                ("_ws.expert.severity", line(SEVERITIES[severity], f"[Severity level: {severity}]")),
                ("_ws.expert.group", line(GROUPS[group], f"[Group: {group}]")),
            ],
        ),
    )


def ip_len(total: int, header: int, reported: Optional[int]) -> list:
    """The items after `ip.len`: its subtree when the total length exceeds what the frame reports."""
    if reported is None or total < header or total <= reported:
        return []
    message = f"IPv4 total length exceeds packet length ({reported} bytes)"
    return [("ip.len_tree", [_expert("ip.bogus_ip_length", message, "Error", "Protocol")])]


def ipv6_plen(plen: int, reported: Optional[int]) -> list:
    """The items after `ipv6.plen`: its subtree when the payload length exceeds what the frame reports."""
    if reported is None or plen <= reported - 40:
        return []
    message = f"IPv6 payload length exceeds framing length ({reported - 40} bytes)"
    return [("ipv6.plen_tree", [_expert("ipv6.plen_exceeds_framing", message, "Warning", "Protocol")])]


def udp_length(length: int, payload: Optional[int]) -> list:
    """`udp.length` and, when it exceeds the IP payload the frame reports (`payload`), its subtree."""
    if payload is None or length <= payload or length < 8:
        return [("udp.length", str(length))]
    message = f"Bad length value {length} > IP payload length"
    return [
        ("udp.length", line(str(length), f"Length: {length} (bogus, payload length {payload})")),
        (
            "udp.length_tree",
            [_expert("udp.length.bad", message, "Error", "Malformed"), ("_ws.malformed", "Malformed Packet")],
        ),
    ]


def payload(total: int, header: int, reported: Optional[int]) -> Optional[int]:
    """The IP payload's reported bytes, as tshark cuts its tvb to the header's length."""
    return None if reported is None else max(min(total, reported) - header, 0)


def udp_info(d) -> Optional[str]:
    """What tshark's UDP Info column says of a decoded frame's (ibwire.decode.Decoded) bad UDP length, before
    `Len=` ("[BAD UDP LENGTH 980 > IP PAYLOAD LENGTH]"), or of one below 8, in place of it; None when right."""
    udp = d.packet.getlayer("UDP") if d.packet is not None else None
    ip = udp.underlayer if udp is not None else None
    if ip is None or ip.original is None or type(ip).__name__ not in ("IP", "IPv6"):
        return None
    reported = len(ip.original) + d.frame.wirelen - len(d.frame.data)
    v4 = type(ip).__name__ == "IP"
    if v4 and ip.len < ip.ihl * 4:
        return None  # (tshark ends the IP layer there: not yet)
    carried = payload(ip.len, ip.ihl * 4, reported) if v4 else payload(ip.plen + 40, 40, reported)
    if udp.len < 8:
        return f"[BAD UDP LENGTH {udp.len} < 8]"
    return f"[BAD UDP LENGTH {udp.len} > IP PAYLOAD LENGTH]" if udp.len > carried else None
