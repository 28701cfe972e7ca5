"""The BTH opcode table: the one place that says what each opcode is.

IBA Vol 1 §9.2 table 36 (opcode bits 7-5 name the transport, bits 4-0 the operation), IBA 1.5 for
FLUSH and ATOMIC WRITE, RoCE Annex A17 for the CNP (0x81), and Mellanox's Dynamically Connected transport
in the RD opcode range (an 8-byte extension after the BTH, then RDETH and DETH; see _build).  Layers, the summary
line, the fast path and the traffic generator all read `OPCODES`.
"""

from typing import Dict, NamedTuple, Tuple


class Opcode(NamedTuple):
    code: int
    transport: str  # RC, UC, RD/DC, UD, CNP, XRC
    name: str  # operation name, e.g. "RDMA WRITE First"
    headers: Tuple[str, ...]  # extended headers after the BTH, in wire order (Wireshark layer names)
    payload: bool  # whether a payload may follow the headers
    op: str  # operation family: send, write, read_req, read_resp, ack, atomic,
    #                           atomic_ack, resync, flush, atomic_write, cnp
    seg: str  # segment position: first, middle, last, only (or "" when not segmented)

    @property
    def full_name(self) -> str:
        return f"{self.transport} {self.name}"

    @property
    def is_response(self) -> bool:
        return self.op in ("read_resp", "ack", "atomic_ack")


# Operation (bits 4-0) -> (name, headers, payload, op family, segment).  Headers are those of RC.
_OPS = {
    0x00: ("SEND First", (), True, "send", "first"),
    0x01: ("SEND Middle", (), True, "send", "middle"),
    0x02: ("SEND Last", (), True, "send", "last"),
    0x03: ("SEND Last with Immediate", ("immdt",), True, "send", "last"),
    0x04: ("SEND Only", (), True, "send", "only"),
    0x05: ("SEND Only with Immediate", ("immdt",), True, "send", "only"),
    0x06: ("RDMA WRITE First", ("reth",), True, "write", "first"),
    0x07: ("RDMA WRITE Middle", (), True, "write", "middle"),
    0x08: ("RDMA WRITE Last", (), True, "write", "last"),
    0x09: ("RDMA WRITE Last with Immediate", ("immdt",), True, "write", "last"),
    0x0A: ("RDMA WRITE Only", ("reth",), True, "write", "only"),
    0x0B: ("RDMA WRITE Only with Immediate", ("reth", "immdt"), True, "write", "only"),
    0x0C: ("RDMA READ Request", ("reth",), False, "read_req", ""),
    0x0D: ("RDMA READ Response First", ("aeth",), True, "read_resp", "first"),
    0x0E: ("RDMA READ Response Middle", (), True, "read_resp", "middle"),
    0x0F: ("RDMA READ Response Last", ("aeth",), True, "read_resp", "last"),
    0x10: ("RDMA READ Response Only", ("aeth",), True, "read_resp", "only"),
    0x11: ("Acknowledge", ("aeth",), False, "ack", ""),
    0x12: ("ATOMIC Acknowledge", ("aeth", "atomicacketh"), False, "atomic_ack", ""),
    0x13: ("CmpSwap", ("atomiceth",), False, "atomic", ""),
    0x14: ("FetchAdd", ("atomiceth",), False, "atomic", ""),
    0x15: ("RESYNC", (), False, "resync", ""),
    0x16: ("SEND Last with Invalidate", ("ieth",), True, "send", "last"),
    0x17: ("SEND Only with Invalidate", ("ieth",), True, "send", "only"),
    0x1C: ("FLUSH", ("feth", "reth"), False, "flush", ""),
    0x1D: ("ATOMIC WRITE", ("reth",), True, "atomic_write", ""),
}

_RC = [c for c in _OPS if c != 0x15]
_UC = list(range(0x00, 0x0C))
_RD = list(_OPS)
_UD = [0x04, 0x05]
_XRC = _RC

TRANSPORTS = {0: "RC", 1: "UC", 2: "DC", 3: "UD", 4: "CNP", 5: "XRC"}

# Length of each extended header, in bytes.
HEADER_LEN = {
    "rdeth": 4,
    "deth": 8,
    "xrceth": 4,
    "reth": 16,
    "aeth": 4,
    "atomiceth": 28,
    "atomicacketh": 8,
    "immdt": 4,
    "ieth": 4,
    "feth": 4,
    "cnp": 16,
    "dcext": 8,
}


def _build() -> Dict[int, Opcode]:
    table = {}
    for base, codes in ((0x00, _RC), (0x20, _UC), (0x40, _RD), (0x60, _UD), (0xA0, _XRC)):
        tname = TRANSPORTS[base >> 5]
        for low in codes:
            name, hdrs, payload, op, seg = _OPS[low]
            if base == 0x40:
                # Dynamically Connected (Mellanox): an 8-byte extension after the BTH, then RDETH and DETH
                # before the operation's own headers, in requests and responses alike.  The public DC
                # capture's Acknowledge shows it: 24 bytes = extension, RDETH and DETH echoing the
                # request's, AETH.  (tshark 4.0 reads an AETH right after the extension: its RD
                # Acknowledge case never parses the RDETH, so it decodes the RDETH as the AETH.)
                hdrs = ("dcext", "rdeth", "deth") + hdrs
            elif base == 0x60:
                hdrs = ("deth",) + hdrs
            elif base == 0xA0 and op not in ("read_resp", "ack", "atomic_ack"):
                hdrs = ("xrceth",) + hdrs
            table[base | low] = Opcode(base | low, tname, name, hdrs, payload, op, seg)
    table[0x81] = Opcode(0x81, "CNP", "Congestion Notification", ("cnp",), False, "cnp", "")
    return table


OPCODES: Dict[int, Opcode] = _build()


def lookup(code: int) -> Opcode:
    """The table entry, or an 'Unknown' entry (no extended headers, payload kept) for unassigned codes."""
    try:
        return OPCODES[code]
    except KeyError:
        tname = TRANSPORTS.get(code >> 5, "VENDOR")
        return Opcode(code, tname, f"Unknown (0x{code:02x})", (), True, "unknown", "")


def headers_len(code: int) -> int:
    return sum(HEADER_LEN[h] for h in lookup(code).headers)


# AETH syndrome (IBA §9.7.5.2.1): bits 6-5 say ACK (0), RNR NAK (1), reserved (2), NAK (3).
AETH_KINDS = {0: "ack", 1: "rnr_nak", 2: "reserved", 3: "nak"}
AETH_ACK, AETH_RNR_NAK, AETH_NAK = 0, 1, 3


def aeth_kind(syndrome):
    """The AETH_KINDS key of a syndrome (an int or an integer array): bits 6-5, whatever the reserved bit
    7 holds (as tshark's syndrome.opcode)."""
    return (syndrome >> 5) & 3


NAK_CODES = {
    0: "PSN Sequence Error",
    1: "Invalid Request",
    2: "Remote Access Error",
    3: "Remote Operational Error",
    4: "Invalid RD Request",
}
# RNR NAK timer field -> minimum delay in milliseconds (IBA table 45).
RNR_TIMER_MS = (
    655.36,
    0.01,
    0.02,
    0.03,
    0.04,
    0.06,
    0.08,
    0.12,
    0.16,
    0.24,
    0.32,
    0.48,
    0.64,
    0.96,
    1.28,
    1.92,
    2.56,
    3.84,
    5.12,
    7.68,
    10.24,
    15.36,
    20.48,
    30.72,
    40.96,
    61.44,
    81.92,
    122.88,
    163.84,
    245.76,
    327.68,
    491.52,
)
# AETH credit count field -> number of credits (IBA table 44); 31 means credits are not limited.
CREDITS = (
    0,
    1,
    2,
    3,
    4,
    6,
    8,
    12,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    3072,
    4096,
    6144,
    8192,
    12288,
    16384,
    24576,
    32768,
    None,
)

GRH_NXTHDR_BTH = 0x1B  # a GRH's (or RoCEv1's) next header when a BTH follows (IBA §8.3.1)
