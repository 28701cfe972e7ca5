"""Byte builders for IB transport headers and MADs, with precompiled structs (no scapy on this path).

Layouts: IBA Vol 1 §5.2 (LRH), §8.3 (GRH), §9.2-9.3 (BTH and extended headers), §13.4 (MAD common
header), §14.2.1 (SMP), §15.2.1 (SA MAD), §12.6 (CM messages), §14.2.5 (NodeInfo, PortInfo, P_KeyTable,
SMInfo, Notice).  Which extended headers an opcode carries comes from `dissectors.opcodes`.
"""

import struct

from dissectors.opcodes import HEADER_LEN, OPCODES

LRH = struct.Struct(">BBHHH")
GRH = struct.Struct(">IHBB16s16s")
BTH = struct.Struct(">BBHII")
DETH = struct.Struct(">II")
RETH = struct.Struct(">QII")
AETH = struct.Struct(">I")
ATOMICETH = struct.Struct(">QIQQ")
ATOMICACKETH = struct.Struct(">Q")
U32 = struct.Struct(">I")
MAD_HDR = struct.Struct(">BBBBHHQHHI")

CNP_PAD = bytes(HEADER_LEN["cnp"])
_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")

# AETH syndromes (IBA §9.7.5.2.1)
SYN_NAK_PSN = 0x60
SYN_RNR = 0x20


def ext_headers(
    opcode: int, *, qkey=0, src_qp=0, va=0, rkey=0, dmalen=0, aeth=0, swap=0, compare=0, orig=0, imm=0, xrcsrq=0
) -> bytes:
    """The extended headers `opcode` carries, in the order `dissectors.opcodes.OPCODES` lists them."""
    out = []
    for h in OPCODES[opcode].headers:
        if h == "deth":
            out.append(DETH.pack(qkey, src_qp & 0xFFFFFF))
        elif h == "reth":
            out.append(RETH.pack(va, rkey, dmalen))
        elif h == "aeth":
            out.append(AETH.pack(aeth))
        elif h == "atomiceth":
            out.append(ATOMICETH.pack(va, rkey, swap, compare))
        elif h == "atomicacketh":
            out.append(ATOMICACKETH.pack(orig))
        elif h in ("immdt", "ieth"):
            out.append(U32.pack(imm))
        elif h == "xrceth":
            out.append(U32.pack(xrcsrq & 0xFFFFFF))
        elif h == "cnp":
            out.append(CNP_PAD)
        else:  # pragma: no cover - the generator never emits RD/DC opcodes
            raise ValueError(f"the generator cannot build header {h}")
    return b"".join(out)


def transport(
    opcode: int,
    pkey: int,
    dqp: int,
    psn: int,
    ext: bytes = b"",
    payload: bytes = b"",
    *,
    ackreq=False,
    se=False,
    mig=True,
    fecn=False,
    becn=False,
) -> bytes:
    """BTH + extended headers + payload + pad bytes (pad count in BTH makes the payload a 4-byte multiple)."""
    pad = -len(payload) & 3
    b1 = (se << 7) | (mig << 6) | (pad << 4)
    return (
        BTH.pack(opcode, b1, pkey, (fecn << 31) | (becn << 30) | (dqp & 0xFFFFFF), (ackreq << 31) | (psn & 0xFFFFFF))
        + ext
        + payload
        + _PADS[pad]
    )


def mad_header(
    mgmt_class, class_version, method, attr_id, tid, attr_mod=0, status=0, class_specific=0, base_version=1
) -> bytes:
    return MAD_HDR.pack(
        base_version, mgmt_class, class_version, method, status, class_specific, tid, attr_id, 0, attr_mod
    )


def pad_to(b: bytes, n: int) -> bytes:
    return b + bytes(n - len(b))
