"""Each decision about what a packet is, stated once with the answer the InfiniBand spec gives, and checked
on crafted frames against both decoders: the compiled records (ibwire.decode.scan) and the full decode
(ibwire.decode, scapy layers).

Decisions: the link (RoCEv2 over IPv4/IPv6, RoCEv1, native IB with and without GRH); the transport and
operation the BTH opcode names, for each transport and a reserved opcode (IBA vol 1 §9.2 table 36, annex
A17.9.3 for the CNP); which extended headers follow the BTH and where (§9.3); MAD or not and how many
(§13.4, §13.5: UD datagrams to or from QP0/QP1); the RMPP segment an SA GetTable response is (§13.6.2.1);
and damage: captured bytes ending inside the BTH, an extended header or the MAD header (truncated), declared
lengths ending inside an extended header or the MAD header or leaving less than the pad count (malformed),
a changed byte (bad ICRC §7.8.1, bad VCRC §7.8.2).

Frames are built byte by byte from the spec's layouts (not from dissectors.opcodes); ibwire.synth.links only
frames them (Ethernet, IP, UDP, GRH, LRH, ICRC, VCRC).  Each table entry is one branch; one function per
decoder reads its answers into the same vocabulary, compared with the entry's.  Both decoders take these
decisions from dissectors.decisions (the compiled loop through the tables ibwire.decode.batch builds from it);
a decoder found answering otherwise gets a WRONG entry saying what it answers, a strict xfail until fixed.
"""

import struct
from types import SimpleNamespace
from typing import NamedTuple, Optional, Tuple

import pytest

from dissectors.mad import MAD
from ibwire.decode import decode_frame
from ibwire.decode import records as R
from ibwire.decode.batch import KNOWN
from ibwire.decode.scan import read_all
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter
from ibwire.synth.links import Link


class Header(NamedTuple):
    name: str  # Wireshark's name, e.g. "reth"
    data: bytes
    values: dict  # Wireshark field name -> value


def header(name, *fields):
    """An extended header from (field, bytes, value) in wire order; a field named "" is reserved."""
    data = b"".join(v.to_bytes(n, "big") for _, n, v in fields)
    return Header(name, data, {f"{name}.{f}": v for f, _, v in fields if f})


# §9.3 layouts, with values non-zero in every field
RDETH = header("rdeth", ("", 1, 0), ("eecnxt", 3, 0xABCDEF))
DETH = header("deth", ("q_key", 4, 0x1234ABCD), ("", 1, 0), ("srcqp", 3, 0xC0DE01))
XRCETH = header("xrceth", ("", 1, 0), ("xrcsrq", 3, 0x5EB0E1))
RETH = header("reth", ("va", 8, 0x1122334455667788), ("r_key", 4, 0xA1B2C3D4), ("dmalen", 4, 0x12345))
AETH = header("aeth", ("syndrome", 1, 0x1F), ("msn", 3, 0x123456))  # ACK, credits not limited
ATOMICETH = header(
    "atomiceth", ("va", 8, 0x2233445566778899), ("r_key", 4, 0xB1C2D3E4), ("swapdt", 8, 0x5A5A), ("cmpdt", 8, 0x3C3C)
)
ATOMICACKETH = header("atomicacketh", ("origremdt", 8, 0x0102030405060708))
IMMDT = header("immdt", ("data", 4, 0xDEADBEEF))
IETH = header("ieth", ("r_key", 4, 0xCAFEF00D))
CNP = Header("cnp", bytes(16), {})  # annex A17.9.3: 16 reserved bytes after the BTH
GSI_DETH = header("deth", ("q_key", 4, 0x80010000), ("", 1, 0), ("srcqp", 3, 1))  # QP1 and its well-known Q_Key
SMI_DETH = header("deth", ("q_key", 4, 0), ("", 1, 0), ("srcqp", 3, 0))
DC_EXT = Header("dcext", bytes(range(1, 9)), {})  # Mellanox DC: 8 bytes after the BTH (dissectors/opcodes.py)
FIELDS = {h.name: list(h.values) for h in (RDETH, DETH, XRCETH, RETH, AETH, ATOMICETH, ATOMICACKETH, IMMDT, IETH, CNP)}
CLIENT_QP, OTHER_QP = 0x000ABC, 0x000DEF


def mad(mgmt_class, method, attr_id, class_version=1, data=b""):
    """A 256-byte MAD: the 24-byte common header (§13.4.3), then class data."""
    head = struct.pack(">BBBBHHQHHI", 1, mgmt_class, class_version, method, 0, 0, 0x1234, attr_id, 0, 0)
    return (head + data).ljust(256, b"\0")


def sa_mad(rmpp_type, flags=0, segment=0, paylen=0):
    """An SA GetTable(PathRecord), or with RMPP active its response: RMPP header (§13.6.2.1: RRespTime the high
    5 bits of byte 2, RMPPFlags the low 3), SA header (§15.2.1, AttributeOffset 8 words), data."""
    rmpp = struct.pack(">BBBBII", 1, rmpp_type, 0x1F << 3 | flags, 0, segment, paylen)
    sa = struct.pack(">QHHQ", 0, 8, 0, 0)
    return mad(0x03, 0x92 if rmpp_type else 0x12, 0x0035, 2, rmpp + sa + bytes(range(200)))


class Case(NamedTuple):
    id: str
    link: str  # a records.LINK_KINDS name
    frames: Tuple[bytes, ...]  # transport bytes (BTH onwards); every frame has the answers in `want`
    want: dict
    snap: Optional[int] = None  # bytes from the BTH on that the capture holds (the wire had them all)
    flip: Optional[Tuple[int, int]] = None  # (offset in the frame, negative from its end; XOR mask)


def case(
    id,
    link,
    opcode,
    headers,
    payload,
    what,
    *,
    qp=CLIENT_QP,
    padcnt=None,
    cut=None,
    frames=1,
    mad=None,
    rmpp=None,
    problems="",
    snap=None,
    flip=None,
):
    """An entry: a packet of `opcode`, `headers` and `payload` (padded to 4 bytes, or `padcnt` set without pad
    bytes; cut to `cut` bytes before framing, so its declared lengths end there) and what it is: `what` is the
    transport and operation ("RC" alone for a reserved opcode), `mad` (class, method, attribute) when it
    holds one, `rmpp` the RMPP header fields, `problems` its damage (comma-separated)."""
    problems = problems.split(", ") if problems else []
    pad = -len(payload) & 3 if padcnt is None else padcnt
    bth = struct.pack(">BBHII", opcode, 0x40 | pad << 4, 0xFFFF, qp, 0x42)  # M=1, P_Key 0xFFFF, PSN 0x42
    tp = bth + b"".join(h.data for h in headers) + payload + bytes(pad if padcnt is None else 0)
    transport, _, name = what.partition(" ")
    damaged = {"truncated", "malformed"} & set(problems)  # only what its first bytes say is checked
    crc = "truncated" if "truncated" in problems else "good"
    want = {
        "link": link,
        "bth": True,
        "opcode": opcode,
        "transport": transport,
        "name": name or None,
        "headers": None if damaged else {h.name: h.values for h in headers if h.name in FIELDS},
        "paylen": None if damaged or mad else len(payload),
        "mads": 1 if mad else 0,
        "mad": mad,
        "rmpp": rmpp,
        "problems": sorted(problems),
        "icrc": "bad" if "bad icrc" in problems else crc,
        "vcrc": ("bad" if "bad vcrc" in problems else crc) if link.startswith("ib") else None,
    }
    return Case(id, link, (tp[:cut],) * frames, want, snap, flip)


def gsi(id, link, payload, mad, **kw):
    """An entry for a UD SEND Only from QP1 (to QP1 unless `qp` says otherwise) carrying `payload`."""
    return case(id, link, 0x64, [GSI_DETH], payload, "UD SEND Only", **{"qp": 1, "mad": mad, **kw})


NODEINFO, CM_REQ, SA_GET_TABLE = mad(0x01, 0x01, 0x0011), mad(0x07, 0x03, 0x0010, 2), sa_mad(0)
REQ, PATH = (0x07, 0x03, 0x0010), (0x03, 0x12, 0x0035)  # CM ConnectRequest, SubnAdmGetTable(PathRecord)
WRITE = (0x0A, [RETH], b"abcd", "RC RDMA WRITE Only")
SA_RMPP = {"rmpptype": 0, "rmppflags": 0, "rresptime": 0x1F}
CASES = [
    # 1. transport and operation from the opcode (§9.2 table 36), one of each; 2. extended headers (§9.3)
    case("rc-rdma-write-only", "roce2v4", 0x0A, [RETH], b"12345", "RC RDMA WRITE Only"),
    case("uc-rdma-write-only-imm", "roce2v6", 0x2B, [RETH, IMMDT], b"abcd", "UC RDMA WRITE Only with Immediate"),
    # the project's reading of the RD range (dissectors/opcodes.py: Mellanox DC, as the public DC capture shows)
    case("dc-send-only", "ib", 0x44, [DC_EXT, RDETH, DETH], b"abcd", "DC SEND Only"),
    case("ud-send-only", "roce1", 0x64, [DETH], b"12345678", "UD SEND Only", qp=OTHER_QP),
    case("cnp", "roce2v4", 0x81, [CNP], b"", "CNP Congestion Notification"),
    case("xrc-send-only", "ib+grh", 0xA4, [XRCETH], b"abcd", "XRC SEND Only"),
    case("xrc-read-response-only", "roce2v4", 0xB0, [AETH], b"abcdefgh", "XRC RDMA READ Response Only"),  # no XRCETH
    case("rc-reserved-opcode", "roce2v4", 0x1E, [], b"abcd", "RC", problems="unknown opcode"),
    case("rc-acknowledge", "roce2v6", 0x11, [AETH], b"", "RC Acknowledge"),
    case("rc-atomic-acknowledge", "roce1", 0x12, [AETH, ATOMICACKETH], b"", "RC ATOMIC Acknowledge"),
    case("rc-cmpswap", "ib", 0x13, [ATOMICETH], b"", "RC CmpSwap"),
    case("rc-send-only-invalidate", "roce2v4", 0x17, [IETH], b"abc", "RC SEND Only with Invalidate"),
    # 3. MAD or not (§13.4, §13.5): a UD datagram to or from QP0/QP1 carries a MAD, nothing else does
    case("smp-to-qp0", "ib", 0x64, [SMI_DETH], NODEINFO, "UD SEND Only", qp=0, mad=(0x01, 0x01, 0x0011)),
    gsi("gmp-to-qp1", "roce2v4", CM_REQ, REQ),
    # a GMP response goes back to the requester's QP, which need not be QP1 (§13.5.1)
    gsi("gmp-response-to-client-qp", "roce2v6", mad(0x04, 0x81, 0x0012), (0x04, 0x81, 0x0012), qp=CLIENT_QP),
    case("mad-looking-payload-on-rc", "roce2v4", 0x04, [], CM_REQ, "RC SEND Only", qp=1),
    # 4. how many MADs: one per UD datagram however long, so one per frame over several frames
    gsi("two-mad-lengths-one-datagram", "roce2v4", CM_REQ * 2, REQ),
    gsi("one-mad-per-frame", "roce2v6", CM_REQ, REQ, frames=3),
    # 5. RMPP (§13.6.2.1): flags Active 1, First 2, Last 4; the compiled records hand SA MADs to the full decode
    gsi("sa-get-table-rmpp-inactive", "roce2v4", SA_GET_TABLE, PATH, rmpp=SA_RMPP),
    *[
        gsi(
            f"sa-get-table-resp-rmpp-{pos}",
            "ib",
            sa_mad(1, flags, seg, size),
            (0x03, 0x92, 0x0035),
            rmpp={**SA_RMPP, "rmpptype": 1, "rmppflags": flags, "segmentnumber": seg, "payloadlength": size},
        )
        for pos, flags, seg, size in (("first", 3, 1, 660), ("middle", 1, 2, 0), ("last", 5, 3, 220))
    ],
    # 6. damage: captured bytes ending early are a truncated capture of a whole packet; declared lengths ending
    # inside a header, or leaving less than the pad count, a malformed packet; a byte changed, a bad CRC.
    # snap/cut count from the BTH: 12 bytes BTH, 8 RETH or DETH, 20 of the 24-byte MAD header
    case("captured-to-inside-bth", "roce2v4", *WRITE, snap=6, problems="truncated"),
    case("captured-to-inside-reth", "roce2v4", *WRITE, snap=20, problems="truncated"),
    gsi("captured-to-inside-mad-header", "ib", SA_GET_TABLE, PATH, snap=40, problems="truncated"),
    case("declared-end-inside-reth", "roce2v4", *WRITE, cut=20, problems="malformed"),
    gsi("declared-end-inside-mad-header", "roce2v4", SA_GET_TABLE, PATH, cut=40, problems="malformed"),
    case("payload-shorter-than-pad", "roce2v4", 0x04, [], b"xy", "RC SEND Only", padcnt=3, problems="malformed"),
    case("payload-byte-changed", "roce2v6", 0x04, [], b"abcd", "RC SEND Only", flip=(-5, 1), problems="bad icrc"),
    case(
        "payload-byte-changed-ib", "ib", 0x04, [], b"abcd", "RC SEND Only", flip=(-7, 1), problems="bad icrc, bad vcrc"
    ),
    # VL is a variant field (§7.8.1): changed on the way, it breaks the VCRC and not the ICRC
    case("vl-changed", "ib", 0x04, [], b"abcd", "RC SEND Only", flip=(0, 0x10), problems="bad vcrc"),
]

# (entry, decoder) -> what that decoder answers instead: the xfails
WRONG = {}  # none since both decoders follow dissectors.decisions


def _port(i):
    return SimpleNamespace(
        lid=0x10 + i,
        gid=bytes([0xFE, 0x80] + [0] * 13 + [i]),
        mac=bytes([2, 0, 0, 0, 0, i]),
        ip4=bytes([10, 0, 0, i]),
        ip6=bytes([0xFD] + [0] * 14 + [i]),
        vlan=None,
        pcp=0,
    )


def capture(c: Case, path) -> str:
    link = Link({"roce2v4": "roce2", "roce2v6": "roce2-v6", "ib+grh": "ib"}.get(c.link, c.link))
    with PcapWriter(str(path), link.linktype) as w:
        for i, tp in enumerate(c.frames):
            frame = bytearray(link.frame(_port(1), _port(2), tp, global_route=c.link == "ib+grh"))
            if c.flip:
                frame[c.flip[0]] ^= c.flip[1]
            bth_at = len(frame) - len(tp) - 4 - (2 if link.native else 0)
            w.write(bytes(frame if c.snap is None else frame[: bth_at + c.snap]), 1.0 + i, wirelen=len(frame))
    return str(path)


def compiled_answers(path) -> list:
    """The records' answers.  They name no transport or operation (readers look the opcode up) and hold no RMPP
    header (SA MADs, F_MAD with class 0x03, are handed to the full decode: ibwire/report/packets/printer.py)."""
    out = []
    for r in read_all(path):
        flags, op = int(r["flags"]), int(r["opcode"])
        headers = {}
        for name, keys in FIELDS.items():
            vals = {k: int(r[R.KEY_FIELDS[k]]) for k in keys if k in R.KEY_FIELDS}
            if any(vals.values()):
                headers[name] = vals
        problems = {
            "bad icrc": r["icrc"] == R.BAD,
            "bad vcrc": r["vcrc"] == R.BAD,
            "malformed": flags & R.F_MALFORMED,
            "truncated": flags & R.F_TRUNCATED,
            "unknown opcode": not KNOWN[op] & 1,  # the opcode table the compiled loop is given
        }
        mad = flags & R.F_MAD
        out.append(
            {
                "link": R.LINK_KINDS[r["link"]],
                "bth": bool(flags & R.F_BTH),
                "opcode": op,
                "headers": headers,
                "paylen": int(r["paylen"]),
                "mads": int(bool(mad)),
                "mad": (int(r["mad_class"]), int(r["mad_method"]), int(r["mad_attrid"])) if mad else None,
                "problems": sorted(p for p, on in problems.items() if on),
                "icrc": R.CRC_STATUS[r["icrc"]],
                "vcrc": R.CRC_STATUS[r["vcrc"]],
            }
        )
    return out


def _link(flat) -> str:
    if "lrh" in flat:
        return "ib+grh" if "grh" in flat else "ib"
    if "grh" in flat:
        return "roce1"
    return "roce2v6" if "ipv6" in flat else "roce2v4" if "ip" in flat else "other"


def full_answers(path) -> list:
    """The full decode's answers, from its Wireshark-named fields, errors and layers."""
    out = []
    for fr in iter_frames(path):
        d = decode_frame(fr)
        flat = d.flat
        mads, layer = 0, d.packet
        while layer:
            mads, layer = mads + isinstance(layer, MAD), layer.payload
        problems = {
            "bad icrc": flat.get("icrc.status") == "bad",
            "bad vcrc": flat.get("vcrc.status") == "bad",
            "malformed": flat.get("_ws.malformed"),
            "truncated": any(e.startswith("truncated") for e in d.errors),
            "unknown opcode": any(e.startswith("unknown opcode") for e in d.errors),
        }
        out.append(
            {
                "link": _link(flat),
                "bth": "bth" in flat,
                "opcode": flat.get("bth.opcode"),
                "transport": flat.get("bth.transport"),
                "name": None if problems["unknown opcode"] else flat.get("bth.opname"),
                "headers": {n: {k: flat.get(k) for k in keys} for n, keys in FIELDS.items() if n in flat},
                "paylen": flat.get("payload.length", 0),
                "mads": mads,
                "mad": (flat["mad.mgmtclass"], flat["mad.method"], flat["mad.attributeid"]) if mads else None,
                "rmpp": {k[5:]: v for k, v in flat.items() if k.startswith("rmpp.")},
                "problems": sorted(p for p, on in problems.items() if on),
                "icrc": flat.get("icrc.status"),
                "vcrc": flat.get("vcrc.status"),
            }
        )
    return out


def expected(c: Case, decoder: str) -> dict:
    """The entry's answers a decoder can give (None: left open by the entry)."""
    want = dict(c.want)
    if decoder == "compiled":
        want.update(transport=None, name=None, rmpp=None)
        if want["vcrc"] is None:
            want["vcrc"] = "absent"
        if want["headers"] is not None:  # the headers the records have a non-zero field of
            keep = {n: {k: v for k, v in vals.items() if k in R.KEY_FIELDS} for n, vals in want["headers"].items()}
            want["headers"] = {n: vals for n, vals in keep.items() if any(vals.values())}
    return {k: v for k, v in want.items() if v is not None}


PARAMS = [
    pytest.param(
        c,
        decoder,
        id=f"{c.id}-{decoder}",
        marks=[pytest.mark.xfail(strict=True, reason=WRONG[c.id, decoder])] if (c.id, decoder) in WRONG else [],
    )
    for c in CASES
    for decoder in ("compiled", "full")
]


@pytest.mark.parametrize("c, decoder", PARAMS)
def test_decision(c, decoder, tmp_path):
    want = expected(c, decoder)
    got = (compiled_answers if decoder == "compiled" else full_answers)(capture(c, tmp_path / "case.pcap"))
    for g in got:
        for k in set(g) - set(want):
            del g[k]
        if "rmpp" in g:
            g["rmpp"] = {k: g["rmpp"].get(k) for k in want["rmpp"]}
    assert got == [want] * len(c.frames)


def test_table_ids_are_unique_and_xfails_name_entries():
    assert set(WRONG) <= {(c.id, d) for c in CASES for d in ("compiled", "full")}
    assert len({c.id for c in CASES}) == len(CASES)
