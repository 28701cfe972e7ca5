"""What a packet is, decided once: the rules the scapy layers follow here and the compiled records follow
through the tables ibwire.decode.batch builds from this module (tests/test_decisions.py states each answer).

- Extended headers and payload per opcode: dissectors.opcodes.OPCODES (IBA §9.2 table 36, §9.3).
- A MAD rides in a UD datagram to or from a management QP (§13.4: QP0 carries SMPs, QP1 GMPs; a GMP
  response goes back to the requester's QP, §13.5.1), as Wireshark recognises them.
- Malformed: the declared length (LRH PktLen, GRH PayLen or UDP length) leaves less than the opcode's
  extended headers and pad count (§9.2: PadCnt pad bytes end the payload), or a MAD shorter than its
  common header (§13.4.3).  A capture cut short is truncated, never malformed.
"""

from dissectors.numbers import MAD_HEADER_LEN, MANAGEMENT_QPS
from dissectors.opcodes import headers_len, lookup


def may_carry_mad(opcode: int) -> bool:
    """A UD SEND: its payload is a MAD when either end is a management QP."""
    op = lookup(opcode)
    return op.transport == "UD" and op.op == "send"


def carries_mad(opcode: int, destqp: int, srcqp) -> bool:
    """Is the payload of this packet a MAD?  `srcqp` is DETH.SrcQP (None when there is no DETH)."""
    return may_carry_mad(opcode) and (destqp in MANAGEMENT_QPS or srcqp in MANAGEMENT_QPS)


def payload_length(opcode: int, padcnt: int, declared: int) -> int:
    """Payload bytes of a packet whose BTH is followed by `declared` bytes before its ICRC: what is left
    after the extended headers and pad bytes (an undefined opcode's bytes count as payload); negative when
    they do not fit."""
    op = lookup(opcode)
    return declared - headers_len(opcode) - (padcnt if op.payload else 0)


def malformed(opcode: int, padcnt: int, declared: int, destqp: int, srcqp) -> str:
    """Why the packet's declared length cannot hold what its BTH says, or "" when it can."""
    n = payload_length(opcode, padcnt, declared)
    if n < 0:
        return f"{-n} bytes short of its extended headers and pad"
    if carries_mad(opcode, destqp, srcqp) and n < MAD_HEADER_LEN:
        return f"MAD of {n} bytes, shorter than its {MAD_HEADER_LEN}-byte header"
    return ""
