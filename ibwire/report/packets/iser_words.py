"""How tshark words the iSER items of `-V` (packet-iser.c): the flags byte summed up by its opcode's name
and the bits set (`Flags: 0x14, Opcode: iSCSI Control-Type PDU, RSV`)."""

from dissectors.iscsitable import CONTROL, HELLO_REPLY, OPCODES, REJ, RSV, SBC_NAMES, WRITE_10, WRITE_16, WSV

ISER_OPCODES = {1: "iSCSI Control-Type PDU", 2: "Hello Message", 3: "HelloReply Message"}


def _flags(text: str) -> str:
    flags = int(text, 0)
    op = flags >> 4
    bits = ((WSV, "WSV"), (RSV, "RSV")) if op == CONTROL else ((REJ, "REJ"),) if op == HELLO_REPLY else ()
    names = [f"Opcode: {ISER_OPCODES[op]}"] if op in ISER_OPCODES else []
    return ", ".join([text] + names + [name for mask, name in bits if flags & mask])


WORDED = {"iser.flags": _flags}
GENERATED = {"scsi.status"}  # a response's status in its SCSI layer: tshark's generated item, bracketed
# CDB flags packet-scsi.c words as the whole line (proto_tree_add_uint_format)
WHOLE = {
    "scsi.inquiry.flags": lambda v: f"CMDT = {int(v, 0) & 2}, EVPD = {int(v, 0) & 1}",
    "scsi.mode.flags": lambda v: f"DBD = {int(v, 0) & 8}",
}


def heading(items: list) -> str:
    """The iSCSI layer's title as tshark gives it: `iSCSI (SCSI Command)`."""
    op = next((v for k, v in items if k == "iscsi.opcode"), None)
    return f"iSCSI ({OPCODES.get(int(op, 0), f'Opcode {op}')})" if isinstance(op, str) else "iSCSI"


def scsi_heading(items: list) -> str:
    """The SCSI layer's title as tshark gives it: `SCSI CDB Read(10)`, `SCSI Payload (Write(10) Request
    Data)`, `SCSI Response (Inquiry)`, `SCSI: SNS Info`."""
    keys = dict(items)
    if "scsi_sbc.opcode" in keys:
        op = int(keys["scsi_sbc.opcode"], 0)
        name = SBC_NAMES.get(op, f"0x{op:02x}")
        if "scsi.status" in keys:
            return f"SCSI Response ({name})"
        if "scsi.request_frame" not in keys:
            return f"SCSI CDB {name}"
        return f"SCSI Payload ({name} {'Request' if op in (WRITE_10, WRITE_16) else 'Response'} Data)"
    return "SCSI: SNS Info" if "scsi.sns.errtype" in keys else "SCSI"
