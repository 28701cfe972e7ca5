"""iSER as scapy layers: the iSER header (RFC 7145 §9.2), the iSCSI PDU (RFC 7143 §11) and the SCSI
command fields tshark shows with it (SBC-3), each holding its bytes and the tree dissectors.iscsitable
reads from them under Wireshark 4.4's names (`iser.*`, `iscsi.*`, `scsi.*`, `scsi_sbc.*`).  Which SCSI
fields a response or data PDU gets depends on its command: ibwire.decode.iser follows that across frames."""

from dissectors.rpcrdma import TreeLayer, made


class ISER(TreeLayer):
    name = "iSCSI Extensions for RDMA"
    ws_name = "iser"


class ISCSI(TreeLayer):
    name = "iSCSI"
    ws_name = "iscsi"


class SCSI(TreeLayer):
    name = "SCSI"
    ws_name = "scsi"


class SBC(TreeLayer):
    """The SBC fields of the SCSI tree (`scsi_sbc.*`), for filters and columns; shown inside SCSI."""

    name = "SCSI SBC"
    ws_name = "scsi_sbc"


__all__ = ["ISER", "ISCSI", "SCSI", "SBC", "made"]
