"""The summary line, tshark's columns: No., Time, Source → Destination, Protocol, Length, Info.

Info for an InfiniBand or RoCE packet: `RC RDMA WRITE First  QP=0x000200  PSN=5  P_Key 0xffff full`,
the traffic class of RoCE (`PCP 3  DSCP 26`), then the MAD (`SubnGet(NodeInfo)`, `CM: ConnectRequest`), the AETH's kind when it is not a plain ACK
(`NAK PSN Sequence Error`, `RNR NAK 0.64 ms`) and flags `[A, SE, FECN, BECN, ECN-CE, bad ICRC,
truncated, malformed, unknown opcode]`.  Packets the records hold are printed from them by line programs
(ibwire.report.packets.program; `record_parts`), all others from the full decode (`detail_info`), in the same
layout.
"""

from typing import List, Optional, Tuple

import numpy as np

from dissectors.opcodes import AETH_KINDS, NAK_CODES, RNR_TIMER_MS, aeth_kind, lookup
from ibwire.decode import records as R
from ibwire.report.escape import printable

# The columns' minimum widths; the time column's depends on the format (-t).
NUMBER_WIDTH, ADDR_WIDTH = 6, 15
PROTOCOL = {R.ROCE1: "RoCE", R.ROCE2V4: "RRoCE", R.ROCE2V6: "RRoCE", R.IB: "InfiniBand", R.IBGRH: "InfiniBand"}
# Record fields whose values the summary prints as text of the group (equal within a group).
GROUP_FIELDS = (
    "link",
    "flags",
    "src",
    "dst",
    "slid",
    "dlid",
    "opcode",
    "se",
    "a",
    "fecn",
    "becn",
    "ecn",
    "p_key",
    "vlan",
    "pcp",
    "dscp",
    "aeth_syndrome",
    "mad_class",
    "mad_method",
    "mad_attrid",
    "icrc",
    "vcrc",
)


def _runs(fields) -> np.dtype:
    """A view of RECORD whose fields are the runs of adjacent bytes `fields` cover: the group-by copies 10
    runs a record instead of 22 fields (200 -> 140 us a batch of 5,376), and groups the records alike."""
    runs = []
    for off, size in sorted((R.RECORD.fields[f][1], R.RECORD.fields[f][0].itemsize) for f in fields):
        if runs and sum(runs[-1]) == off:
            runs[-1][1] += size
        else:
            runs.append([off, size])
    return np.dtype(
        {
            "names": [f"run{i}" for i in range(len(runs))],
            "formats": [f"V{size}" for _, size in runs],
            "offsets": [off for off, _ in runs],
            "itemsize": R.RECORD.itemsize,
        }
    )


GROUP_VIEW = _runs(GROUP_FIELDS)


def aeth_text(syndrome: int) -> str:
    """`NAK PSN Sequence Error`, `RNR NAK 0.64 ms`; '' for an ACK (IBA §9.7.5.2.1)."""
    kind, value = AETH_KINDS[aeth_kind(syndrome)], syndrome & 0x1F
    if kind == "nak":
        return f"NAK {NAK_CODES.get(value, f'code {value}')}"
    if kind == "rnr_nak":
        return f"RNR NAK {RNR_TIMER_MS[value]:g} ms"
    if kind == "reserved":
        return f"AETH reserved syndrome 0x{syndrome:02x}"
    return ""


def mad_text(mgmtclass: int, method: int, attrid: int) -> str:
    from dissectors.madnames import summary

    return summary(mgmtclass, method, attrid)


def flag_list(row) -> List[str]:
    f = int(row["flags"])
    names = [
        n
        for n, on in (
            ("A", row["a"]),
            ("SE", row["se"]),
            ("FECN", row["fecn"]),
            ("BECN", row["becn"]),
            ("ECN-CE", row["ecn"] == 3 and row["link"] != R.IB),
        )
        if on
    ]
    if row["icrc"] == R.BAD:
        names.append("bad ICRC")
    if row["vcrc"] == R.BAD:
        names.append("bad VCRC")
    if f & R.F_TRUNCATED:
        names.append("truncated")
    if f & R.F_MALFORMED:
        names.append("malformed")
    if lookup(int(row["opcode"])).op == "unknown":
        names.append("unknown opcode")
    return names


def qos_text(row) -> List[str]:
    """`PCP 3` when the frame has a VLAN tag, `DSCP 26` on RoCE (IP, IPv6, or the RoCEv1 GRH's traffic class)."""
    out = [f"PCP {int(row['pcp'])}"] if row["vlan"] >= 0 else []
    return out + ([f"DSCP {int(row['dscp'])}"] if row["link"] in (R.ROCE1, R.ROCE2V4, R.ROCE2V6) else [])


def endpoints(row) -> Tuple[str, str]:
    link = int(row["link"])
    if link == R.IB:
        return f"LID {int(row['slid'])}", f"LID {int(row['dlid'])}"
    return R.addr_text(row["src"]), R.addr_text(row["dst"])


def head(src: str, dst: str, proto: str) -> str:
    return f" {src:>{ADDR_WIDTH}} → {dst:<{ADDR_WIDTH}} {proto} "


def record_parts(row, time_part) -> list:
    """The line program of an InfiniBand/RoCE record: literal text from the group's fields, the frame
    number, time, length, QP and PSN per packet."""
    src, dst = endpoints(row)
    op = lookup(int(row["opcode"]))
    extra = []
    if row["flags"] & R.F_MAD:
        extra.append(mad_text(int(row["mad_class"]), int(row["mad_method"]), int(row["mad_attrid"])))
    if "aeth" in op.headers:
        extra.append(aeth_text(int(row["aeth_syndrome"])))
    flags = flag_list(row)
    if flags:
        extra.append("[" + ", ".join(flags) + "]")
    pk = int(row["p_key"])
    tail = f"  P_Key 0x{pk:04x} {'full' if pk & 0x8000 else 'limited'}" + "".join(f"  {q}" for q in qos_text(row))
    tail += "".join(f"  {e}" for e in extra if e)
    return [
        ("udec", "frame", 0, NUMBER_WIDTH),
        " ",
        time_part,
        head(src, dst, PROTOCOL[int(row["link"])]),
        ("udec", "len"),
        f"  {op.transport} {op.name}  QP=0x",
        ("hex", "destqp", 6),
        "  PSN=",
        ("udec", "psn"),
        tail + "\n",
    ]


STORAGE_PROTOCOLS = (  # the Protocol column as tshark's
    ("nfs", "NFS"),
    ("rpc", "RPC"),
    ("rpcordma", "RPCoRDMA"),
    ("smb2", "SMB2"),
    ("smb_direct", "SMBDirect"),
)

STORAGE_PROTOCOLS = (("iscsi", "iSCSI"), ("iser", "iSER")) + STORAGE_PROTOCOLS


def detail_info(d) -> Tuple[str, str, str, str]:
    """(source, destination, protocol, info) of a fully decoded frame that is not an IB/RoCE data packet:
    Ethernet, ARP, IPv4/IPv6, UDP, ICMP, IPoIB — never scapy's own text."""
    f = d.flat
    error = _icmp_error(f)
    # (an ICMP error's carried datagram cut short, its bad ICRC: tshark's columns are not written inside an error)
    errors = [e.split(":")[0] if e.startswith("malformed") else e for e in d.errors]
    errors = [e for e in errors if e.startswith("truncated")] if error else errors
    if "bth" in f and not error and not ("ipoib" in f and ("arp" in f or "ip" in f or "ipv6" in f)):
        # an IB packet the records do not hold (heuristic ...); IPoIB is shown by what it carries, as tshark
        src, dst = _addresses(f)
        info = d.line.split("  ", 1)[1] if " → " in d.line else d.line
        proto = next((name for key, name in STORAGE_PROTOCOLS if key in f), "InfiniBand")
        return src, dst, "NVMe-oF" if any(k.startswith("nvme") for k in f) else proto, info
    src, dst = _addresses(f)
    if "arp" in f:
        op = f.get("arp.opcode")
        tell = f.get("arp.src.proto_ipv4")
        if op == 1:
            info = f"Who has {f.get('arp.dst.proto_ipv4')}? Tell {tell}"
        elif op == 2:
            info = f"{tell} is at {f.get('arp.src.hw_mac', f.get('arp.src.hw', '?'))}"
        else:
            info = f"ARP opcode {op}"
        proto = "ARP"
    elif "icmp" in f:
        info, proto = _icmp_text(f, d.packet), "ICMP"
    elif "icmpv6" in f:
        info, proto = _icmpv6_text(f), "ICMPv6"
    elif "tcp" in f:
        names = [
            n for bit, n in ((2, "SYN"), (16, "ACK"), (1, "FIN"), (4, "RST"), (8, "PSH")) if f.get("tcp.flags", 0) & bit
        ]
        info = (
            f"{f.get('tcp.srcport')} → {f.get('tcp.dstport')} [{', '.join(names)}] Seq={f.get('tcp.seq')} "
            f"Ack={f.get('tcp.ack')} Win={f.get('tcp.window_size_value')}"
        )
        proto = "TCP"
    elif "udp" in f:
        from ibwire.report.packets import length_experts  # (a full decode's: scapy is loaded)

        bad, length = length_experts.udp_info(d), f.get("udp.length") or 8
        info = f"{f.get('udp.srcport')} → {f.get('udp.dstport')} " + (
            bad if bad and length < 8 else f"{bad + ' ' if bad else ''}Len={max(length - 8, 0)}"
        )
        proto = "UDP"
    elif "ip" in f:  # (a protocol tshark does not dissect: named as packet-ip.c and packet-ipv6.c name it)
        info, proto = _protocol(f.get("ip.proto")), "IPv4"
    elif "ipv6" in f:
        info, proto = f"Unknown IP Protocol: {_protocol(f.get('ipv6.nxt'))}", "IPv6"
    elif "macc" in f or "lldp" in f:  # PAUSE, PFC, LLDP: the decode's own summary after the addresses
        info = d.summary.split("  ", 1)[1] if "  " in d.summary else d.summary
        proto = "LLDP" if "lldp" in f else "PFC" if "macc.cbfc.enbv" in f else "MAC CTRL"
    elif "eth" in f:
        info, proto = f"Ethernet type 0x{f.get('eth.type', 0):04x}", "Ethernet"
    elif "ipoib" in f:
        info, proto = "IPoIB", "IPoIB"
    else:
        info, proto = "", f"link type {d.frame.linktype}"
    if errors:
        info = (info + "  " if info else "") + "[" + ", ".join(dict.fromkeys(errors)) + "]"
    return src, dst, proto, info


def _protocol(number) -> str:
    """An IP protocol number as tshark names it: `any private encryption scheme (99)`, `Unknown (253)`."""
    from ibwire.report.packets.ws_labels import VALUES

    return f"{VALUES['ip.proto'].get(number, 'Unknown')} ({number})"


def _icmp_error(f) -> bool:
    """An ICMP or ICMPv6 error, which tshark's columns show as such whatever it carries."""
    return f.get("icmp.type") in (3, 4, 5, 11, 12) or f.get("icmpv6.type") in (1, 2, 3, 4)


def _icmp_text(f, packet) -> str:
    """tshark's Info of ICMP (packet-icmp.c): the type's name padded to 20 characters, the code's name in
    parentheses where the type has them, a message numbered like an echo `id=0x…, seq=BE/LE, ttl=…`."""
    from scapy.layers.inet import ICMP

    from ibwire.report.packets.icmp_doc import CODES, ECHO_LIKE, TYPES

    kind, code = f.get("icmp.type"), f.get("icmp.code")
    name = TYPES.get(kind, "Unknown ICMP (obsolete or malformed?)")
    name = "Mobile IP Advertisement" if kind == 9 and code in (0, 16) else name
    names = CODES.get(kind)
    info = f"{name:<20}" + (f" ({names.get(code, f'Unknown code: {code}')})" if names is not None else "")
    layer = packet.getlayer(ICMP) if packet is not None else None
    if kind in ECHO_LIKE and layer is not None and layer.seq is not None:
        seq = layer.seq
        le = int.from_bytes(seq.to_bytes(2, "big"), "little")
        info += f" id=0x{layer.id:04x}, seq={seq}/{le}" + (f", ttl={f['ip.ttl']}" if "ip.ttl" in f else "")
    return info


def _icmpv6_text(f) -> str:
    """tshark's Info of ICMPv6 (packet-icmpv6.c) for echo and neighbour discovery, else the type's name."""
    from ibwire.report.packets.icmpv6_doc import CODES, TYPES, UNKNOWN_CODES

    t, code = f.get("icmpv6.type"), f.get("icmpv6.code")
    info = TYPES.get(t, f"ICMPv6 type {t} code {code}")
    if t in (1, 2, 3, 4):  # an error: the code's name, as packet-icmpv6.c appends it
        named = CODES.get((t, code), UNKNOWN_CODES.get(t, "")).format(code)
        info += f" ({named})" if named else ""
    elif t in (128, 129):
        info += (
            f" id=0x{f['icmpv6.echo.identifier']:04x}, seq={f['icmpv6.echo.sequence_number']}, "
            f"hop limit={f.get('ipv6.hlim')}"
        )
    elif t == 135:
        info += f" for {f['icmpv6.nd.ns.target_address']}"
    elif t == 136:
        flags = [n for n, k in (("rtr", "r"), ("sol", "s"), ("ovr", "o")) if f.get(f"icmpv6.nd.na.flag.{k}")]
        info += f" {f['icmpv6.nd.na.target_address']}" + (f" ({', '.join(flags)})" if flags else "")
    return info


def _addresses(f) -> Tuple[str, str]:
    """tshark's Source and Destination: IP addresses, else the GIDs of a GRH, else LIDs (ARP over IB
    included), else ARP's or Ethernet's."""
    for a, b in (("ip.src", "ip.dst"), ("ipv6.src", "ipv6.dst"), ("grh.sgid", "grh.dgid")):
        if a in f:
            return str(f[a]), str(f.get(b, ""))
    if "lrh.slid" in f:
        return f"LID {f['lrh.slid']}", f"LID {f['lrh.dlid']}"
    for a, b in (("arp.src.proto_ipv4", "arp.dst.proto_ipv4"), ("eth.src", "eth.dst")):
        if a in f:
            return str(f[a]), str(f.get(b, ""))
    return "", ""


def detail_parts(d, time_part, note: str = "") -> list:
    src, dst, proto, info = map(printable, detail_info(d))
    return [
        ("udec", "frame", 0, NUMBER_WIDTH),
        " ",
        time_part,
        head(src, dst, proto),
        ("udec", "len"),
        f"  {info}{note}\n",
    ]


ECHO = (
    ("icmp", 8, 0, "icmp.ident", "icmp.seq"),
    ("icmpv6", 128, 129, "icmpv6.echo.identifier", "icmpv6.echo.sequence_number"),
)


class EchoPairs:
    """tshark's ` (request in N)` after an echo reply (packet-icmp.c, packet-icmpv6.c: requests and replies
    matched by addresses, identifier and sequence number), for requests this run has decoded."""

    def __init__(self):
        self.requests = {}

    def note(self, f: dict, number: int) -> str:
        for proto, request, reply, ident, seq in ECHO:
            kind = f.get(f"{proto}.type")
            if kind not in (request, reply) or ident not in f:
                continue
            src, dst = _addresses(f)
            if kind == request:
                self.requests[(proto, src, dst, f[ident], f[seq])] = number
                return ""
            asked = self.requests.get((proto, dst, src, f[ident], f[seq]))
            return f" (request in {asked})" if asked else ""
        return ""


def time_part(mode: str, decimals: int) -> Optional[tuple]:
    """The time column's format for tshark's -t modes (a, ad, u, ud: clock; r, d, dd, e: seconds)."""
    if mode in ("a", "ad", "u", "ud"):
        return ("date", "time_ns", decimals, (1 if mode.endswith("d") else 0) | (2 if mode[0] == "u" else 0))
    return ("time", "time_ns", decimals, 11 if mode != "e" else 20)
