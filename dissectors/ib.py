"""InfiniBand transport headers (IBA Vol 1 §5.2 LRH, §8.3 GRH, §9.2-9.5 BTH and extended headers).

Which extended headers follow a BTH comes from `opcodes.OPCODES`: each header asks the BTH below it
for the next one, so a DETH or RETH needs no binding of its own.  Trailers (pad bytes, ICRC, VCRC)
are split off by the layer whose length field delimits them and appended as their own layers, and
their CRCs are computed on build and verified on dissect.
"""

import struct

from scapy.fields import (
    BitField,
    ByteField,
    IntField,
    IP6Field,
    LongField,
    ShortField,
    StrFixedLenField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
    XStrField,
)
from scapy.packet import Padding, Raw

from dissectors import crc
from dissectors.base import IBLayer
from dissectors.decisions import malformed
from dissectors.opcodes import (
    AETH_KINDS,
    CREDITS,
    GRH_NXTHDR_BTH,
    HEADER_LEN,
    NAK_CODES,
    RNR_TIMER_MS,
    aeth_kind,
    lookup,
)

LNH_RAW, LNH_IPV6, LNH_LOCAL, LNH_GLOBAL = 0, 1, 2, 3


def _split(s: bytes, body_len: int, trailer_len: int):
    """Split `s` into body, trailer and anything beyond; None trailer when the bytes are cut short."""
    if body_len < 0 or len(s) < body_len + trailer_len:
        return s[: max(body_len, 0)], None, b""
    return s[:body_len], s[body_len : body_len + trailer_len], s[body_len + trailer_len :]


class _CRC(IBLayer):
    """A CRC trailer: `status` is "good" when the stored value is the one computed over what it covers,
    "bad" when not, "absent" when the covered bytes are not there; `computed` is that value."""

    status = "absent"
    computed = None

    def judge(self, value, fmt):
        """`value` as computed (sent little-endian), read as the stored field reads it (struct `fmt`)."""
        self.computed = struct.unpack(">" + fmt, struct.pack("<" + fmt, value))[0]
        self.status = "good" if self.computed == self.value else "bad"

    def ws_extra(self):
        return {"status": self.status}

    def mysummary(self):
        return f"{type(self).__name__} {self.status}"


class VCRC(_CRC):
    """Variant CRC, the last two bytes of a native IB packet (IBA §7.8.2)."""

    ws_name = "vcrc"
    ws_alias = {"value": "variant.crc"}
    fields_desc = [XShortField("value", None)]

    def post_build(self, p, pay):
        if self.value is None:
            lrh = self.underlayer
            while lrh is not None and not isinstance(lrh, LRH):
                lrh = lrh.underlayer
            if lrh is not None:
                probe = lrh.copy()
                probe[VCRC].value = 0
                body = bytes(probe)
                body = body[: len(body) - len(bytes(probe[VCRC]))]
                p = struct.pack("<H", crc.vcrc(body)) + p[2:]
        return p + pay

    def post_dissection(self, pkt):
        lrh = self.underlayer
        while lrh is not None and not isinstance(lrh, LRH):
            lrh = lrh.underlayer
        if lrh is None or lrh.original is None or self.original is None:
            return
        covered = lrh.original[: len(lrh.original) - len(self.original)]
        self.judge(crc.vcrc(covered), "H")


class ICRC(_CRC):
    """Invariant CRC after the payload (IBA §7.8.1; RoCE annex A16/A17).  Shown as Wireshark shows it:
    the four stored bytes read big-endian."""

    ws_name = "icrc"
    ws_alias = {"value": "invariant.crc"}
    fields_desc = [XIntField("value", None)]

    def extract_padding(self, s):
        return b"", s

    def _start(self):
        """The layer the ICRC coverage starts at, and which CRC variant applies."""
        from scapy.layers.inet import IP
        from scapy.layers.inet6 import IPv6

        layer = self.underlayer
        while layer is not None and not isinstance(layer, BTH):
            layer = layer.underlayer
        grh = None
        while layer is not None:
            if isinstance(layer, LRH):
                return layer, crc.icrc_ib
            if isinstance(layer, GRH):
                grh = layer
            if isinstance(layer, (IP, IPv6)):
                return layer, crc.icrc_roce2
            layer = layer.underlayer
        return (grh, crc.icrc_roce1) if grh is not None else (None, None)

    def post_build(self, p, pay):
        if self.value is None:
            start, fn = self._start()
            if start is not None:
                probe = start.copy()
                probe[ICRC].value = 0
                if VCRC in probe:
                    probe[VCRC].value = 0
                whole = bytes(probe)
                tail = len(bytes(probe[ICRC]))
                value = fn(whole[: len(whole) - tail])
                p = struct.pack("<I", value) + p[4:]
        return p + pay

    def post_dissection(self, pkt):
        start, fn = self._start()
        if start is None or start.original is None or self.original is None:
            return
        after = len(self.original)
        if fn is crc.icrc_ib:
            vcrc_layer = self.payload
            while vcrc_layer and not isinstance(vcrc_layer, VCRC):
                vcrc_layer = vcrc_layer.payload
            after += len(vcrc_layer.original) if vcrc_layer and vcrc_layer.original else 0
        covered = start.original[: len(start.original) - after]
        try:
            value = fn(covered)
        except (IndexError, ValueError):
            self.status = "bad"
            return
        self.judge(value, "I")


class IBPad(IBLayer):
    """Pad bytes (BTH.PadCnt, 0-3) between the payload and the ICRC (IBA §9.2)."""

    name = "Pad"
    ws_name = "pad"
    fields_desc = [XStrField("pad", b"")]


class LRH(IBLayer):
    """Local Route Header, IBA §7.7.  PktLen counts 4-byte words from the LRH to the ICRC."""

    ws_name = "lrh"
    fields_desc = [
        BitField("vl", 0, 4),
        BitField("lver", 0, 4),
        BitField("sl", 0, 4),
        BitField("reserved2", 0, 2),
        BitField("lnh", LNH_LOCAL, 2),
        ShortField("dlid", 0),
        BitField("reserved5", 0, 5),
        BitField("pktlen", None, 11),
        ShortField("slid", 0),
    ]

    def post_build(self, p, pay):
        if self.pktlen is None:
            words = (len(pay) - (2 if VCRC in self else 0) + 8) // 4
            p = p[:4] + struct.pack(">H", (p[4] & 0xF8) << 8 | (words & 0x7FF)) + p[6:]
        return p + pay

    def dissect(self, s):
        s = self.do_dissect(s)
        if self.truncated:
            self._truncated = True
            return
        body, vcrc_bytes, rest = _split(s, self.pktlen * 4 - 8, 2)
        self._truncated = vcrc_bytes is None
        self.do_dissect_payload(body)
        if vcrc_bytes is not None:
            self.add_payload(VCRC(vcrc_bytes + rest))

    def mysummary(self):
        return self.sprintf("LRH %lrh.slid% > %lrh.dlid% SL %lrh.sl% VL %lrh.vl%")


class GRH(IBLayer):
    """Global Route Header, IBA §8.3 (also the first header of RoCEv1).  PayLen counts from the BTH to
    the ICRC."""

    ws_name = "grh"
    fields_desc = [
        BitField("ipver", 6, 4),
        BitField("tclass", 0, 8),
        BitField("flowlabel", 0, 20),
        ShortField("paylen", None),
        ByteField("nxthdr", GRH_NXTHDR_BTH),
        ByteField("hoplmt", 0),
        IP6Field("sgid", "::"),
        IP6Field("dgid", "::"),
    ]

    def post_build(self, p, pay):
        if self.paylen is None:
            n = len(pay) - (2 if VCRC in self else 0)
            p = p[:4] + struct.pack(">H", n) + p[6:]
        return p + pay

    def extract_padding(self, s):
        return s[: self.paylen], s[self.paylen :]

    def mysummary(self):
        return self.sprintf("GRH %grh.sgid% > %grh.dgid%")


class BTH(IBLayer):
    """Base Transport Header, IBA §9.2 (FECN/BECN from §A10 / RoCE annex A17)."""

    ws_name = "bth"
    fields_desc = [
        ByteField("opcode", 0),
        BitField("se", 0, 1),
        BitField("m", 0, 1),
        BitField("padcnt", 0, 2),
        BitField("tver", 0, 4),
        XShortField("p_key", 0xFFFF),
        BitField("fecn", 0, 1),
        BitField("becn", 0, 1),
        BitField("reserved6", 0, 6),
        XBitField("destqp", 0, 24),
        BitField("a", 0, 1),
        BitField("reserved7", 0, 7),
        BitField("psn", 0, 24),
    ]

    malformed = ""  # dissectors.decisions.malformed's answer for this packet

    def ws_extra(self):
        op = lookup(self.opcode)
        extra = {"transport": op.transport, "opname": op.name}
        if not self.truncated or "p_key" in self.fields:  # read, or built
            extra.update(p_key_full=self.p_key >> 15, p_key_base=self.p_key & 0x7FFF)
        return extra

    def _ib_length(self, s: bytes):
        """Bytes from the end of the BTH up to the ICRC, from whichever header below delimits it."""
        from scapy.layers.inet import UDP

        under = self.underlayer
        if isinstance(under, UDP) and under.len is not None:
            return under.len - 8 - 12 - 4
        if isinstance(under, GRH):
            return under.paylen - 12 - 4
        if isinstance(under, LRH):
            return under.pktlen * 4 - 8 - 12 - 4
        return len(s) - 4

    def dissect(self, s):
        s = self.do_dissect(s)
        if self.truncated:
            self._icrc_truncated = True
            return
        n = self._ib_length(s)
        pad = self.padcnt if lookup(self.opcode).payload else 0
        body, icrc_bytes, rest = _split(s, n, 4)
        self._icrc_truncated = icrc_bytes is None
        if pad and len(body) >= pad:
            body, padding = body[:-pad], body[-pad:]
        else:
            padding = b""
        self.do_dissect_payload(body)
        deth = self.getlayer(DETH)
        self.malformed = malformed(self.opcode, self.padcnt, n, self.destqp, None if deth is None else deth.srcqp)
        if padding:
            self.add_payload(IBPad(padding))
        if icrc_bytes is not None:
            self.add_payload(ICRC(icrc_bytes + rest))
        elif rest:
            self.add_payload(Padding(rest))

    def guess_payload_class(self, payload):
        return next_header_class(self, self, payload)

    def mysummary(self):
        op = lookup(self.opcode)
        return f"{op.transport} {op.name} QP=0x{self.destqp:06x} PSN={self.psn}"


def next_header_class(bth: BTH, current, payload: bytes):
    """The class of the header after `current` (a BTH or an extended header) in `bth`'s packet."""
    op = lookup(bth.opcode)
    names = op.headers
    idx = 0 if current is bth else names.index(current.ws_key) + 1 if current.ws_key in names else len(names)
    if idx < len(names):
        return EXT_HEADERS[names[idx]]
    if op.payload:
        return payload_class(bth, current, payload)
    return Raw


# Hooks deciding what a payload is (MAD on QP0/QP1, IPoIB behind its header); see dissectors.payloads.
_payload_hooks = []


def payload_class(bth, last, payload):
    for hook in _payload_hooks:
        cls = hook(bth, last, payload)
        if cls is not None:
            return cls
    return Raw


class _ExtHeader(IBLayer):
    """An extended transport header: it asks the BTH below which header comes next."""

    ws_key = ""

    def guess_payload_class(self, payload):
        under = self.underlayer
        while under is not None and not isinstance(under, BTH):
            under = under.underlayer
        if under is None:
            return Raw
        return next_header_class(under, self, payload)


class DCExt(_ExtHeader):
    """The 8 bytes Mellanox DC adds to the BTH (Wireshark 4.0 shows them only as BTH bytes)."""

    name = "DC BTH extension"
    ws_name = "bth"
    ws_key = "dcext"
    fields_desc = [StrFixedLenField("dcext", b"\0" * 8, 8)]


class RDETH(_ExtHeader):
    """Reliable Datagram Extended Transport Header, IBA §9.3.1."""

    ws_name = ws_key = "rdeth"
    fields_desc = [XByteField("reserved", 0), BitField("eecnxt", 0, 24)]


class DETH(_ExtHeader):
    """Datagram Extended Transport Header, IBA §9.3.2."""

    ws_name = ws_key = "deth"
    fields_desc = [XIntField("q_key", 0), XByteField("reserved", 0), XBitField("srcqp", 0, 24)]


class XRCETH(_ExtHeader):
    """XRC Extended Transport Header, IBA §9.3.9 (XRC annex)."""

    ws_name = ws_key = "xrceth"
    fields_desc = [XByteField("reserved", 0), XBitField("xrcsrq", 0, 24)]


class RETH(_ExtHeader):
    """RDMA Extended Transport Header, IBA §9.3.3."""

    ws_name = ws_key = "reth"
    fields_desc = [XLongField("va", 0), XIntField("r_key", 0), IntField("dmalen", 0)]


class AtomicETH(_ExtHeader):
    """Atomic Extended Transport Header, IBA §9.3.4."""

    ws_name = ws_key = "atomiceth"
    ws_alias = {"va": "reth.va", "r_key": "reth.r_key"}
    fields_desc = [XLongField("va", 0), XIntField("r_key", 0), LongField("swapdt", 0), LongField("cmpdt", 0)]


class AETH(_ExtHeader):
    """ACK Extended Transport Header, IBA §9.3.5; syndrome per §9.7.5.2.1."""

    ws_name = ws_key = "aeth"
    fields_desc = [ByteField("syndrome", 0), BitField("msn", 0, 24)]
    ws_probes = ({"syndrome": 0}, {"syndrome": 0x20}, {"syndrome": 0x40}, {"syndrome": 0x60})  # ACK, RNR, -, NAK

    def ws_extra(self):
        syn = self.syndrome
        kind_bits, value = aeth_kind(syn), syn & 0x1F
        out = {"kind": AETH_KINDS[kind_bits], "syndrome.reserved": syn >> 7, "syndrome.opcode": kind_bits}
        if kind_bits == 0:
            out["credits"] = CREDITS[value]
            out["syndrome.credit_count"] = value
        elif kind_bits == 1:
            out["rnr_timer"] = value
            out["rnr_timer_ms"] = RNR_TIMER_MS[value]
            out["syndrome.timer"] = value
        elif kind_bits == 3:
            out["nak_code"] = value
            out["nak_name"] = NAK_CODES.get(value, "Reserved")
            out["syndrome.error_code"] = value
        else:
            out["syndrome.reserved_value"] = value
        return out

    def mysummary(self):
        e = self.ws_extra()
        return f"AETH {e['kind']} MSN={self.msn}"


class AtomicAckETH(_ExtHeader):
    """Atomic Acknowledge Extended Transport Header, IBA §9.3.6."""

    ws_name = ws_key = "atomicacketh"
    fields_desc = [LongField("origremdt", 0)]


class ImmDt(_ExtHeader):
    """Immediate Data Extended Transport Header, IBA §9.3.7 (Wireshark shows the 4 bytes as `immdt`)."""

    ws_name = ws_key = "immdt"
    ws_alias = {"data": "immdt"}
    fields_desc = [XIntField("data", 0)]


class IETH(_ExtHeader):
    """Invalidate Extended Transport Header, IBA §9.3.8 (the R_Key to invalidate)."""

    ws_name = ws_key = "ieth"
    ws_alias = {"r_key": "ieth"}
    fields_desc = [XIntField("r_key", 0)]


class FETH(_ExtHeader):
    """FLUSH Extended Transport Header, IBA 1.5 §9.3.10: selectivity level and placement type."""

    ws_name = ws_key = "feth"
    fields_desc = [BitField("reserved", 0, 26), BitField("sel", 0, 2), BitField("plt", 0, 4)]


class CNPPadding(_ExtHeader):
    """The 16 reserved bytes of a RoCEv2 Congestion Notification Packet (annex A17.9.3)."""

    name = "CNP padding"
    ws_name = "cnp"
    ws_key = "cnp"
    fields_desc = [StrFixedLenField("reserved", b"\0" * 16, 16)]


EXT_HEADERS = {
    "dcext": DCExt,
    "rdeth": RDETH,
    "deth": DETH,
    "xrceth": XRCETH,
    "reth": RETH,
    "atomiceth": AtomicETH,
    "aeth": AETH,
    "atomicacketh": AtomicAckETH,
    "immdt": ImmDt,
    "ieth": IETH,
    "feth": FETH,
    "cnp": CNPPadding,
}
assert all(len(cls()) == HEADER_LEN[name] for name, cls in EXT_HEADERS.items())
