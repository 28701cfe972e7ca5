"""ICMP in tshark 4.0's shape (packet-icmp.c): the `icmp` layer of -T json / -T ek, each item's -V line its title.

An echo's identifier and sequence number both ways round, a reply's request frame and response time (tshark's
single pass: a request is matched by the reply's checksum, identifier and sequence number between the same two
addresses, and shows no link to its reply), the timestamp ping puts in the first 8 bytes of the data, then the
data as a `data` object inside the layer.  Other types: type, code, checksum and the second word's fields (RFC
4884's length where set), a timestamp request's or reply's three timestamps, and the datagram an error carries
(icmp_carried).  A message inside an error is neither verified nor matched.
"""

import time
import weakref
from typing import Optional

from ibwire.report.packets.icmp_carried import Node, carried
from ibwire.report.packets.nvme_data_words import Titled
from ibwire.report.packets.tcp_options import line
from ibwire.report.packets.values import bytes_text, seconds

TYPES = {
    0: "Echo (ping) reply",
    1: "Reserved",
    2: "Reserved",
    3: "Destination unreachable",
    4: "Source quench (flow control)",
    5: "Redirect",
    6: "Alternate host address",
    8: "Echo (ping) request",
    9: "Router advertisement",
    10: "Router solicitation",
    11: "Time-to-live exceeded",
    12: "Parameter problem",
    13: "Timestamp request",
    14: "Timestamp reply",
    15: "Information request",
    16: "Information reply",
    17: "Address mask request",
    18: "Address mask reply",
    19: "Reserved (for security)",
    30: "Traceroute",
    31: "Datagram Conversion Error",
    32: "Mobile Host Redirect",
    33: "IPv6 Where-Are-You",
    34: "IPv6 I-Am-Here",
    35: "Mobile Registration Request",
    36: "Mobile Registration Reply",
    37: "Domain Name Request",
    38: "Domain Name Reply",
    39: "SKIP",
    40: "Photuris",
    41: "Experimental mobility protocols",
    42: "Extended Echo request",
    43: "Extended Echo reply",
}
CODES = {  # each type's code names (packet-icmp.c's *_code_str)
    3: (
        "Network unreachable",
        "Host unreachable",
        "Protocol unreachable",
        "Port unreachable",
        "Fragmentation needed",
        "Source route failed",
        "Destination network unknown",
        "Destination host unknown",
        "Source host isolated",
        "Network administratively prohibited",
        "Host administratively prohibited",
        "Network unreachable for TOS",
        "Host unreachable for TOS",
        "Communication administratively filtered",
        "Host precedence violation",
        "Precedence cutoff in effect",
    ),
    5: ("Redirect for network", "Redirect for host", "Redirect for TOS and network", "Redirect for TOS and host"),
    6: ("Alternate address for host",),
    11: ("Time to live exceeded in transit", "Fragment reassembly time exceeded"),
    12: ("Pointer indicates the error", "Required option missing", "Bad length"),
    40: (
        "Bad SPI",
        "Authentication Failed",
        "Decompression Failed",
        "Decryption Failed",
        "Need Authentication",
        "Need Authorization",
    ),
    42: ("No error",),
    43: (
        "No error",
        "Malformed Query",
        "No Such Interface",
        "No Such Table Entry",
        "Multiple Interfaces Satisfy Query",
    ),
}
CODES = {kind: dict(enumerate(names)) for kind, names in CODES.items()}
CODES[9] = {0: "Normal router advertisement", 16: "Does not route common traffic"}
ECHO, ECHO_REPLY = 8, 0
ECHO_LIKE = (0, 8, 13, 14, 15, 16, 17, 18)  # types whose second word is an identifier and a sequence number
ERRORS = (3, 4, 5, 11, 12)  # types carrying the offending datagram
STAMPS = (("originate", "Originate"), ("receive", "Receive"), ("transmit", "Transmit"))
CARRIED_EXPERTS = {"ip.ttl.too_small": "Note/Sequence", "ipv6.invalid_header": "Error/Malformed"}
DAY = 3600 * 24
MS_DAY = DAY * 1000
_SESSIONS = weakref.WeakKeyDictionary()  # tshark_doc.Session -> {(addresses, key): [request frame, ns, replied]}


def in_cksum(data: bytes) -> int:
    """The Internet checksum of `data` (RFC 1071): 0 over a datagram whose checksum is right."""
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icmp_layer(
    raw: bytes, reported: int, ends: frozenset, frame: int, ns: int, session, clock=str, nested: bool = False
) -> list:
    """The icmp layer of a message: `raw` its captured bytes, `reported` its length by the IP header, `ends`
    the IP addresses, `frame` the frame's number, `clock` how a time (ns since the epoch) is written; `nested`:
    the message is inside an error's datagram."""
    if len(raw) < 2:  # tshark stops at the first byte it lacks
        return [_type(raw[0])] if raw else []
    kind, code = raw[0], raw[1]
    if kind in (42, 43):  # RFC 8335's extended echo: not yet
        return [_type(kind)]
    items = [_type(kind, code), _code(kind, code)]
    if len(raw) < 4:
        return items
    items += _checksum(raw, reported, nested)
    if kind in ECHO_LIKE:  # as far as the bytes go
        for at, key, label in ((4, "icmp.ident", "Identifier"), (6, "icmp.seq", "Sequence Number")):
            if len(raw) >= at + 2:
                pair = raw[at : at + 2]
                items += [
                    _dec_hex(key, f"{label} (BE)", int.from_bytes(pair, "big")),
                    _dec_hex(key + "_le", f"{label} (LE)", int.from_bytes(pair, "little")),
                ]
    if len(raw) < 8:
        return items
    if kind in (13, 14):
        return items + _stamps(raw, ns)
    if kind not in (ECHO, ECHO_REPLY):
        return items + _second_word(raw, kind, code)
    items += [] if nested else _transaction(raw, kind, ends, frame, ns, session)
    data = raw[8:reported]
    if len(data) >= 8:
        stamp = _timestamp(data, ns)
        if stamp is not None:
            items += [
                ("icmp.data_time", _absolute(stamp, clock)),
                (
                    "icmp.data_time_relative",
                    line(seconds(ns - stamp), f"[Timestamp from icmp data (relative): {seconds(ns - stamp)} seconds]"),
                ),
            ]
            data = data[8:]
    if data:
        items.append(("data", [("data.data", bytes_text(data)), ("data.len", str(len(data)))]))
    return items


def _type(kind: int, code: int = -1) -> tuple:
    name = TYPES.get(kind, "Unknown ICMP (obsolete or malformed?)")
    name = "Mobile IP Advertisement" if kind == 9 and code in (0, 16) else name
    return ("icmp.type", line(str(kind), f"Type: {kind} ({name})"))


def _code(kind: int, code: int) -> tuple:
    names = CODES.get(kind)
    if names is None:
        return ("icmp.code", line(str(code), f"Code: {code}"))
    return ("icmp.code", line(str(code), f"Code: {code} ({names.get(code, f'Unknown code: {code}')})"))


def _checksum(raw: bytes, reported: int, nested: bool) -> list:
    if len(raw) < reported or nested:  # cut short, or in an error: packet-icmp.c's wording, unverified
        text = f"0x{int.from_bytes(raw[2:4], 'big'):04x}"
        why = "in ICMP error packet" if nested else "fragmented datagram"
        return [
            ("icmp.checksum", line(text, f"Checksum: {text} [unverified] [{why}]")),
            ("icmp.checksum.status", line("2", "[Checksum Status: Unverified]")),
        ]
    return checksum_items("icmp", raw, in_cksum(raw[:reported]), "icmp.checksum_bad")


def checksum_items(proto: str, raw: bytes, computed: int, bad: str) -> list:
    """A verified checksum's items (`computed`: the sum over the message, 0 when right); `bad`: the key of the
    expert item of a wrong one."""
    value = int.from_bytes(raw[2:4], "big")
    text = f"0x{value:04x}"
    if computed == 0:
        return [
            (f"{proto}.checksum", line(text, f"Checksum: {text} [correct]")),
            (f"{proto}.checksum.status", line("1", "[Checksum Status: Good]")),
        ]
    should = (value + computed) & 0xFFFF if value + computed <= 0xFFFF else (value + computed + 1) & 0xFFFF
    message = f"Bad checksum [should be 0x{should:04x}]"
    expert = [
        (bad, line("", f"[{message}]")),
        ("_ws.expert.message", message),
        ("_ws.expert.severity", line("6291456", "[Severity level: Warning]")),
        ("_ws.expert.group", line("16777216", "[Group: Checksum]")),
    ]
    return [
        (f"{proto}.checksum", line(text, f"Checksum: {text} incorrect, should be 0x{should:04x}")),
        (f"{proto}.checksum_tree", [("_ws.expert", expert)]),
        (f"{proto}.checksum.status", line("0", "[Checksum Status: Bad]")),
    ]


def title(key: str, value) -> Optional[str]:
    """-V's title of an ICMP or ICMPv6 text item: a Node, the expert item of a bad checksum."""
    if isinstance(value, Node):
        return value.title
    if key == "_ws.expert" and isinstance(value, list) and value and value[0][0].startswith("icmp"):
        return f"[Expert Info (Warning/Checksum): {dict(value).get('_ws.expert.message', '')}]"
    if key == "_ws.expert" and isinstance(value, list) and value and value[0][0] in CARRIED_EXPERTS:
        return f"[Expert Info ({CARRIED_EXPERTS[value[0][0]]}): {dict(value).get('_ws.expert.message', '')}]"
    return None


def _second_word(raw: bytes, kind: int, code: int) -> list:
    """The fields of an error's or a redirect's second word (RFC 4884's length of the datagram where set), an
    address mask."""
    if kind == 5:
        gateway = ".".join(str(b) for b in raw[4:8])
        return [("icmp.redir_gw", line(gateway, f"Gateway Address: {gateway}"))]
    if kind in (17, 18) and len(raw) >= 12:
        mask = ".".join(str(b) for b in raw[8:12])
        return [("icmp.address_mask", line(mask, f"Address Mask: {mask}"))]
    if kind not in (3, 11, 12):
        return []
    if raw[5]:  # RFC 4884's length of the datagram, in 32-bit words
        length = [
            ("icmp.length", line(str(raw[5]), f"Length: {raw[5]}")),
            ("icmp.length.original_datagram", line(str(raw[5] * 4), f"[Length of original datagram: {raw[5] * 4}]")),
        ]
        first = ("icmp.pointer", line(str(raw[4]), f"Pointer: {raw[4]}")) if kind == 12 else _unused(raw[4:5])
        mtu = int.from_bytes(raw[6:8], "big")
        last = ("icmp.mtu", line(str(mtu), f"MTU of next hop: {mtu}")) if (kind, code) == (3, 4) else _unused(raw[6:8])
        return [first] + length + [last]
    if kind == 12:
        return [("icmp.pointer", line(str(raw[4]), f"Pointer: {raw[4]}")), _unused(raw[5:8])]
    if kind == 3 and code == 4:
        mtu = int.from_bytes(raw[6:8], "big")
        return [_unused(raw[4:6]), ("icmp.mtu", line(str(mtu), f"MTU of next hop: {mtu}"))]
    return [_unused(raw[4:8])]


def _unused(raw: bytes) -> tuple:
    return ("icmp.unused", line(bytes_text(raw), f"Unused: {raw.hex()}"))


def _dec_hex(key: str, label: str, n: int) -> tuple:
    return (key, line(str(n), f"{label}: {n} (0x{n:04x})"))


def _transaction(raw: bytes, kind: int, ends: frozenset, frame: int, ns: int, session) -> list:
    """A request starts a transaction, a reply ends the one it answers (packet-icmp.c transaction_start/end,
    first pass): the key is the checksum the reply would carry, the identifier and the sequence number."""
    checksum = int.from_bytes(raw[2:4], "big")
    if kind == ECHO:  # the reply's checksum: the request's plus the type's difference (0x0800)
        start(session, (ends, in_cksum(((~checksum) & 0xFFFF).to_bytes(2, "big") + b"\xf7\xff"), raw[4:8]), frame, ns)
        return []
    got = end(session, (ends, 0 if checksum == 0xFFFF else checksum, raw[4:8]), ns)
    if got is None:
        return []
    return [
        ("icmp.resp_to", line(str(got[0]), f"[Request frame: {got[0]}]")),
        ("icmp.resptime", line(f"{got[1]:.15g}", f"[Response time: {got[1]:.3f} ms]")),
    ]


def start(session, key: tuple, frame: int, ns: int) -> None:
    """An echo request under `key` (the capture's latest of that key)."""
    _SESSIONS.setdefault(session, {})[key] = [frame, ns, False]


def end(session, key: tuple, ns: int) -> Optional[tuple]:
    """(request frame, response time in ms) of the reply to the request under `key`, None when there is none
    or it was answered already."""
    trans = _SESSIONS.setdefault(session, {}).get(key)
    if trans is None or trans[2]:
        return None
    trans[2] = True
    return trans[0], (ns - trans[1]) / 1e6


class Absolute(Titled):
    """An absolute time's text, its -V line (`title`) and -T ek's UTC ISO 8601 text (`iso`)."""


def _absolute(ns: int, clock) -> Absolute:
    out = Absolute(clock(ns))
    out.title = f"Timestamp from icmp data: {out}"
    out.iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"
    return out


def _stamps(raw: bytes, ns: int) -> list:
    """A timestamp request's or reply's three timestamps, each with the time of day it reads as (ms since
    midnight UTC, the byte order nearer the frame's time: packet-icmp.c get_best_guess_mstimeofday)."""
    frame_ms = (ns // 10**6) % MS_DAY
    items = []
    for i, (key, label) in enumerate(STAMPS):
        word = raw[8 + 4 * i : 12 + 4 * i]
        if len(word) < 4:
            break
        value = int.from_bytes(word, "big")
        when = _ms_text(_best_guess(word, frame_ms))
        items.append(
            (f"icmp.{key}_timestamp", line(str(value), f"{label} Timestamp: {value} ({when} after midnight UTC)"))
        )
    return items


def _best_guess(word: bytes, comp: int) -> int:
    """packet-icmp.c get_best_guess_mstimeofday (its unsigned differences as they wrap)."""
    be, le = int.from_bytes(word, "big") & 0x7FFFFFFF, int.from_bytes(word, "little") & 0x7FFFFFFF
    if be < MS_DAY <= le:
        return be
    if le < MS_DAY <= be:
        return le
    saved = be, le
    if be < MS_DAY and le < MS_DAY:
        late = comp >= MS_DAY - MS_DAY // 4
        be += MS_DAY if be < comp and be <= MS_DAY // 4 and late else 0
        le += MS_DAY if le < comp and le <= MS_DAY // 4 and late else 0
    nearer = (be - comp) % (1 << 32) < (le - comp) % (1 << 32)
    if saved[0] < MS_DAY and saved[1] < MS_DAY:
        return saved[0] if nearer else saved[1]
    return be if nearer else le


def _ms_text(ms: int) -> str:
    """Wireshark's signed_time_msecs_to_str: `3 hours, 17 minutes, 26.660 seconds`."""
    if ms == 0:
        return "0 seconds"
    sec, msec = divmod(ms, 1000)
    minutes, sec = divmod(sec, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [
        f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((days, "day"), (hours, "hour"), (minutes, "minute")) if n
    ]
    if msec:
        parts.append(f"{sec}.{msec:03d} seconds")
    elif sec:
        parts.append(f"{sec} second{'s' if sec != 1 else ''}")
    return ", ".join(parts)


def _timestamp(data: bytes, ns: int):
    """The ns of a timeval in the data's first 8 bytes (seconds and microseconds, big-endian tried first), when
    it lies within a day of the frame's time; else None."""
    secs = ns // 10**9
    for order in ("big", "little"):
        sec, usec = int.from_bytes(data[0:4], order), int.from_bytes(data[4:8], order)
        diff = (sec - secs + (1 << 31)) % (1 << 32) - (1 << 31)  # as tshark's (int) cast of the difference
        if abs(diff) < DAY and usec < 1_000_000:
            return sec * 10**9 + usec * 1000
    return None


def icmp_items(icmp, flat: dict, ns: int, session, clock, walk=None) -> list:
    """The layers of a scapy ICMP layer (its bytes, its length and addresses by the IP header above it, the
    frame's number and lengths from `flat`; `clock`: tshark_doc.frame_time; `walk`: a scapy packet -> its
    layers, for the datagram an error carries): [("icmp", icmp_layer() and the datagram's headers), what
    follows them], or [("data", its bytes)] when the datagram is a fragment."""
    raw = bytes(icmp.original or b"")
    frame = flat.get("frame.number", 0)
    in_frame = len(raw) + max(int(flat.get("frame.len", 0)) - int(flat.get("frame.cap_len", 0)), 0)
    ip = icmp.underlayer
    if ip is None or not hasattr(ip, "ihl"):
        return [("icmp", icmp_layer(raw, in_frame, frozenset(), frame, ns, session, clock))]
    nested = getattr(ip, "in_error", False)
    reported = ip.len - ip.ihl * 4 if ip.len is not None and ip.len >= ip.ihl * 4 else in_frame
    reported = reported if nested else min(reported, in_frame)  # tshark's IP gives no more than the frame holds
    if int(ip.flags) & 1 or ip.frag:  # a fragment: tshark waits for the rest and shows the bytes as Data
        return [("data", [("data.data", bytes_text(raw[:reported])), ("data.len", str(len(raw[:reported])))])]
    raw = raw[:reported]
    items = icmp_layer(raw, reported, frozenset((ip.src, ip.dst)), frame, ns, session, clock, nested)
    if len(raw) <= 8 or raw[0] not in ERRORS or nested:
        return [("icmp", items)]
    inside, after = carried(_datagram(raw, reported), walk, 4)
    return [("icmp", items + inside)] + after


def _datagram(raw: bytes, reported: int) -> bytes:
    """The bytes packet-icmp.c gives the IP dissector: a redirect's IP header and 8 bytes, RFC 4884's length
    where the datagram is longer, else all that follows the second word."""
    inner, words = raw[8:], raw[5] if raw[0] != 5 else 0
    if raw[0] == 5:
        return inner[: (inner[0] & 15) * 4 + 8]
    if words and reported > 8 + 4 * words and len(inner) >= 4 and int.from_bytes(inner[2:4], "big") > 4 * words:
        return inner[: ((inner[0] & 15) + words) * 4]
    return inner
