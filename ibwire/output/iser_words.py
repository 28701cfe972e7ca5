"""How tshark words the iSER items of `-V` (packet-iser.c): the flags byte summed up by its opcode's name
and the bits set (`Flags: 0x14, Opcode: iSCSI Control-Type PDU, RSV`)."""

from dissectors.iscsitable import CONTROL, HELLO_REPLY, OPCODES, REJ, RSV, WSV

ISER_OPCODES = {1: "iSCSI Control-Type PDU", 2: "Hello Message", 3: "HelloReply Message"}


def _flags(text: str) -> str:
    flags = int(text, 0)
    op = flags >> 4
    bits = ((WSV, "WSV"), (RSV, "RSV")) if op == CONTROL else ((REJ, "REJ"),) if op == HELLO_REPLY else ()
    names = [f"Opcode: {ISER_OPCODES[op]}"] if op in ISER_OPCODES else []
    return ", ".join([text] + names + [name for mask, name in bits if flags & mask])


WORDED = {"iser.flags": _flags}


def heading(items: list) -> str:
    """The iSCSI layer's title as tshark gives it: `iSCSI (SCSI Command)`."""
    op = next((v for k, v in items if k == "iscsi.opcode"), None)
    return f"iSCSI ({OPCODES.get(int(op, 0), f'Opcode {op}')})" if isinstance(op, str) else "iSCSI"
