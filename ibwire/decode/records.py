"""The compact per-packet record the fast path produces and every analyzer reads.

One numpy structured array per batch; field meanings follow the Wireshark display-filter names in
`FIELD_KEYS` (the same keys `ibwire decode` prints), so a record and a decoded packet can be compared.
"""

from typing import Iterable, Iterator, List

import numpy as np

# Link/encapsulation kinds (`link` field).
LINK_KINDS = ("other", "roce1", "roce2v4", "roce2v6", "ib", "ib+grh", "ipoib", "iblink")
OTHER, ROCE1, ROCE2V4, ROCE2V6, IB, IBGRH, IPOIB, IBLINK = range(len(LINK_KINDS))

# CRC status codes (`icrc` / `vcrc` fields), as decode reports them in icrc.status / vcrc.status.
CRC_STATUS = ("absent", "good", "bad", "truncated", "unchecked")
ABSENT, GOOD, BAD, TRUNC, UNCHECKED = range(len(CRC_STATUS))

# `flags` bits.
F_BTH = 1  # an InfiniBand transport header was found
F_MALFORMED = 2  # headers contradict each other or the declared lengths
F_TRUNCATED = 4  # captured bytes stop before the packet's end
F_GRH = 8  # a GRH (or IPv6 for RoCEv2) precedes the BTH
F_MAD = 16  # QP0/QP1 traffic with a MAD header decoded
F_HEURISTIC = 32  # RoCEv2 found on a UDP port other than 4791 (BTH plausible and ICRC matched)
F_IPOIB = 64  # a SEND whose payload is IPoIB (RFC 4391): the summary shows what it carries

RECORD = np.dtype(
    [
        ("frame", "u4"),
        ("time", "f8"),
        ("caplen", "u4"),
        ("len", "u4"),
        ("linktype", "u2"),
        ("link", "u1"),
        ("flags", "u1"),
        ("vlan", "i4"),
        ("ecn", "u1"),
        ("pcp", "u1"),
        ("dscp", "u1"),
        ("etype", "u2"),  # VLAN priority (when vlan >= 0), DSCP, inner ethertype
        ("eth_src", "V6"),
        ("eth_dst", "V6"),
        # MAC control (ethertype 0x8808): opcode; PAUSE quanta; PFC class-enable vector, quanta of each priority
        ("macc_opcode", "u2"),
        ("macc_pause_time", "u2"),
        ("macc_enbv", "u2"),
        *((f"macc_pause_c{p}", "u2") for p in range(8)),
        ("src", "V16"),
        ("dst", "V16"),  # GIDs / IPs (v4-mapped)
        ("slid", "u2"),
        ("dlid", "u2"),
        ("sl", "u1"),
        ("vl", "u1"),
        ("udp_src", "u2"),
        ("udp_dst", "u2"),
        ("opcode", "u1"),
        ("se", "u1"),
        ("m", "u1"),
        ("padcnt", "u1"),
        ("tver", "u1"),
        ("p_key", "u2"),
        ("fecn", "u1"),
        ("becn", "u1"),
        ("destqp", "u4"),
        ("a", "u1"),
        ("psn", "u4"),
        ("paylen", "i4"),
        ("reth_va", "u8"),
        ("reth_r_key", "u4"),
        ("reth_dmalen", "u4"),
        ("aeth_syndrome", "u1"),
        ("aeth_msn", "u4"),
        ("deth_q_key", "u4"),
        ("deth_srcqp", "u4"),
        ("atomic_va", "u8"),
        ("atomic_r_key", "u4"),
        ("atomic_swapdt", "u8"),
        ("atomic_cmpdt", "u8"),
        ("atomicack", "u8"),
        ("immdt", "u4"),
        ("ieth", "u4"),
        ("xrcsrq", "u4"),
        ("mad_class", "u1"),
        ("mad_classver", "u1"),
        ("mad_method", "u1"),
        ("mad_status", "u2"),
        ("mad_attrid", "u2"),
        ("mad_attrmod", "u4"),
        ("mad_tid", "u8"),
        ("cm_comm_id", "u4"),
        ("cm_remote_comm_id", "u4"),
        ("cm_qpn", "u4"),
        ("icrc", "u1"),
        ("vcrc", "u1"),
        ("time_ns", "i8"),  # the same time as `time`, in integer nanoseconds since the epoch
        # RC analysis of the whole capture (ANALYSIS below; zero unless ibwire.analyze.frames filled them)
        ("an_retransmission", "u1"),
        ("an_lost", "u1"),
        ("an_duplicate", "u1"),
        ("an_out_of_order", "u1"),
        ("an_psn_gap", "u4"),
        ("an_not_captured", "u4"),
        ("an_retry_cause", "u1"),
        ("an_timeout_retransmission", "u1"),
        ("an_gave_up", "u1"),
        ("an_acks_frame", "u4"),
        ("an_ack_rtt", "i8"),
        ("an_read_request_frame", "u4"),
        ("an_nak", "u1"),
        ("an_rnr_wait", "i8"),
    ]
)

# Record field -> display-filter key (Wireshark names without "infiniband."), for fields that have one.
FIELD_KEYS = {
    "slid": "lrh.slid",
    "dlid": "lrh.dlid",
    "sl": "lrh.sl",
    "vl": "lrh.vl",
    "opcode": "bth.opcode",
    "se": "bth.se",
    "m": "bth.m",
    "padcnt": "bth.padcnt",
    "tver": "bth.tver",
    "p_key": "bth.p_key",
    "fecn": "bth.fecn",
    "becn": "bth.becn",
    "destqp": "bth.destqp",
    "a": "bth.a",
    "psn": "bth.psn",
    "reth_va": "reth.va",
    "reth_r_key": "reth.r_key",
    "reth_dmalen": "reth.dmalen",
    "aeth_syndrome": "aeth.syndrome",
    "aeth_msn": "aeth.msn",
    "deth_q_key": "deth.q_key",
    "deth_srcqp": "deth.srcqp",
    "atomic_va": "atomiceth.va",
    "atomic_r_key": "atomiceth.r_key",
    "atomic_swapdt": "atomiceth.swapdt",
    "atomic_cmpdt": "atomiceth.cmpdt",
    "atomicack": "atomicacketh.origremdt",
    "immdt": "immdt.data",
    "ieth": "ieth.r_key",
    "xrcsrq": "xrceth.xrcsrq",
    "mad_class": "mad.mgmtclass",
    "mad_classver": "mad.classversion",
    "mad_method": "mad.method",
    "mad_status": "mad.status",
    "mad_attrid": "mad.attributeid",
    "mad_attrmod": "mad.attributemodifier",
    "mad_tid": "mad.transactionid",
    "udp_src": "udp.srcport",
    "udp_dst": "udp.dstport",
    "vlan": "vlan.id",
    "ecn": "ip.dsfield.ecn",
    "pcp": "vlan.priority",
    "dscp": "ip.dsfield.dscp",
    "frame": "frame.number",
    "linktype": "frame.linktype",
    "caplen": "frame.cap_len",
    "len": "frame.len",
    "time": "frame.time_epoch",
    "icrc": "icrc.status",
    "vcrc": "vcrc.status",
    "link": "link.kind",
    "paylen": "payload.len",
    "src": "addr.src",
    "dst": "addr.dst",
    "eth_src": "eth.src",
    "eth_dst": "eth.dst",
    "macc_opcode": "macc.opcode",
    "macc_pause_time": "macc.pause_time",
    "macc_enbv": "macc.cbfc.enbv",
    **{f"macc_pause_c{p}": f"macc.cbfc.pause_time.c{p}" for p in range(8)},
}
KEY_FIELDS = {v: k for k, v in FIELD_KEYS.items()}

# Per-packet RC analysis fields, in the style of Wireshark's tcp.analysis.*: record field -> (display-filter
# key, kind).  Kinds: "flag" (present or not), "count", "frame" (a frame number), "cause" (RETRY_CAUSES),
# "span" (nanoseconds, shown in seconds).  A field is present where its column is non-zero; ack_rtt where
# acks_frame is.  docs/rc-analysis.md says what each means.
ANALYSIS = {
    "an_retransmission": ("bth.analysis.retransmission", "flag"),
    "an_lost": ("bth.analysis.lost", "flag"),
    "an_duplicate": ("bth.analysis.duplicate", "flag"),
    "an_out_of_order": ("bth.analysis.out_of_order", "flag"),
    "an_psn_gap": ("bth.analysis.psn_gap", "count"),
    "an_not_captured": ("bth.analysis.not_captured", "count"),
    "an_retry_cause": ("bth.analysis.retry_cause", "cause"),
    "an_timeout_retransmission": ("bth.analysis.timeout_retransmission", "flag"),
    "an_gave_up": ("bth.analysis.gave_up", "flag"),
    "an_acks_frame": ("bth.analysis.acks_frame", "frame"),
    "an_ack_rtt": ("bth.analysis.ack_rtt", "span"),
    "an_read_request_frame": ("bth.analysis.read_request_frame", "frame"),
    "an_nak": ("bth.analysis.nak", "flag"),
    "an_rnr_wait": ("bth.analysis.rnr_wait", "span"),
}
ANALYSIS_FIELDS = {key: col for col, (key, _) in ANALYSIS.items()}
RETRY_CAUSES = ("", "timeout", "nak", "rnr")


class Rows:
    """Some rows of the records, a column at a time (indexing the records whole copies every column)."""

    def __init__(self, rec: np.ndarray, rows: np.ndarray):
        self.rec, self.rows = rec, rows

    def __getitem__(self, col: str) -> np.ndarray:
        return self.rec[col][self.rows]

    def __len__(self) -> int:
        return len(self.rows)


def analysis_present(rec, col: str) -> np.ndarray:
    """Rows of `rec` (records or decode.columns) that carry the analysis field of column `col`."""
    return rec["an_acks_frame" if col == "an_ack_rtt" else col] != 0


def analysis_values(row) -> dict:
    """The analysis fields one record carries: key -> True, a number, a cause's name or seconds."""
    out = {}
    for col, (key, kind) in ANALYSIS.items():
        v = int(row["an_acks_frame" if col == "an_ack_rtt" else col])
        if v:
            v = int(row[col])
            out[key] = (
                True if kind == "flag" else RETRY_CAUSES[v] if kind == "cause" else v / 1e9 if kind == "span" else v
            )
    return out


def addr_text(v: bytes) -> str:
    """A 16-byte address as text: dotted IPv4 for v4-mapped addresses, else IPv6/GID notation."""
    import ipaddress

    b = bytes(v)
    if b[:12] == b"\0" * 10 + b"\xff\xff":
        return str(ipaddress.IPv4Address(b[12:]))
    return str(ipaddress.IPv6Address(b))


def mac_text(v: bytes) -> str:
    return ":".join(f"{x:02x}" for x in bytes(v))


def join(parts: List[np.ndarray]) -> np.ndarray:
    """One record array of `parts`, copied a whole record at a time (numpy copies a structured dtype field
    by field, several times slower)."""
    if not parts:
        return np.zeros(0, RECORD)
    if len(parts) == 1:
        return parts[0]
    whole = np.dtype((np.void, RECORD.itemsize))
    return np.concatenate([np.ascontiguousarray(p).view(whole) for p in parts]).view(RECORD)


def gathered(batches: Iterable[np.ndarray], rows: int) -> Iterator[np.ndarray]:
    """The record batches of `batches` joined into arrays of at least `rows` records (the last may hold
    fewer)."""
    parts, n = [], 0
    for rec in batches:
        if len(rec):
            parts.append(rec)
            n += len(rec)
        if n >= rows:
            yield join(parts)
            parts, n = [], 0
    if parts:
        yield join(parts)
