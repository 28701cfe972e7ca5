"""The storage view of iSER: one row per SCSI command (RFC 7143 §11.3) carried in iSER messages (RFC 7145),
with its command frame, the RDMA READ/WRITE frames that used its STags, its SCSI Response frame, latency,
bytes moved and SCSI status, as followed by ibwire.decode.iser (bulk mode)."""

from typing import List

from dissectors.iscsitable import SBC_NAMES, STATUS, lba_blocks
from ibwire.analyze.requests import transfer_columns

GOOD = STATUS[0]


def status_text(cmd) -> str:
    if cmd.done is None:
        return "no response"
    if cmd.response:
        return f"iSCSI response 0x{cmd.response:02x}"
    return STATUS.get(cmd.status, f"status 0x{cmd.status:02x}")


def scsi_rows(tracker) -> List[dict]:
    """One row per SCSI command, in command order (the columns of the NVMe-oF command table where they
    apply)."""
    rows = []
    for c in tracker.commands:
        lba, blocks = lba_blocks(c.cdb)
        rows.append(
            {
                "connection": f"{c.initiator} → {c.target}",
                "opcode": SBC_NAMES.get(c.cdb[0], f"0x{c.cdb[0]:02x}"),
                "itt": f"0x{c.itt:08x}",
                "lun": c.lun,
                "lba": lba,
                "blocks": blocks,
                **transfer_columns(c.frame, c.time, c.data, c.done, c.done_time, c.bytes),
                "status": status_text(c),
                "time": c.time,
            }
        )
    return rows
