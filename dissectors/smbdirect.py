"""SMB Direct as scapy layers: the SMB Direct message (MS-SMBD §2.2), the fragments a message was
reassembled from, and the SMB2 message it carries (MS-SMB2 §2.2.1), each holding its bytes and the tree
dissectors.smbdirecttable or dissectors.smb2table reads from them under Wireshark 4.4's names
(`smb_direct.*`, `smb2.*`).  ibwire.decode.smbdirect follows them across frames."""

from dissectors.rpcrdma import TreeLayer, made


class SMBDirect(TreeLayer):
    name = "SMB-Direct (SMB RDMA Transport)"
    ws_name = "smb_direct"


class Fragments(TreeLayer):
    """The messages a fragmented SMB Direct payload was reassembled from (tshark's `smb_direct.fragments`)."""

    name = "Reassembled SMB Direct Fragments"
    ws_name = "smb_direct"
    json_name = "smb_direct.fragments"


class SMB2(TreeLayer):
    name = "SMB2 (Server Message Block Protocol version 2)"
    ws_name = "smb2"


__all__ = ["SMBDirect", "Fragments", "SMB2", "made"]
