"""NFS over RDMA as scapy layers: the RPC-RDMA header (RFC 8166 §4.2), the ONC RPC message (RFC 5531 §9)
and the NFS arguments or results (RFC 1813, RFC 7530), each holding its bytes and the tree
dissectors.rpcrdmatable reads from them under Wireshark 4.4's names (`rpcordma.*`, `rpc.*`, `nfs.*`).
Which tree a reply gets depends on its call: ibwire.decode.rpcrdma follows that across frames."""

from scapy.fields import StrField

from dissectors.base import IBLayer
from dissectors.rpcrdmatable import leaves


class TreeLayer(IBLayer):
    """A protocol's bytes and its tree (set by `made`); ws_extra gives every leaf by its Wireshark name."""

    fields_desc = [StrField("_raw", b"")]
    tree = ()

    def copy(self):
        out = super().copy()
        out.tree = self.tree
        return out

    def ws_extra(self):
        prefix = self.ws_name + "."
        return {k[len(prefix) :]: v for k, v in leaves(list(self.tree)).items() if k.startswith(prefix)}


class RPCoRDMA(TreeLayer):
    name = "RPC over RDMA"
    ws_name = "rpcordma"


class Fragments(TreeLayer):
    """The packets a SEND First … Last was reassembled from (tshark's `rpcordma.fragments` item)."""

    name = "Reassembled RPCoRDMA fragments"
    ws_name = "rpcordma"
    json_name = "rpcordma.fragments"


class ONCRPC(TreeLayer):
    name = "Remote Procedure Call"
    ws_name = "rpc"


class NFS(TreeLayer):
    name = "Network File System"
    ws_name = "nfs"


def made(cls, data: bytes, tree: list):
    """A layer of `cls` holding `data`, with its tree."""
    layer = cls(data)
    layer.tree = tree
    return layer


__all__ = ["TreeLayer", "Fragments", "RPCoRDMA", "ONCRPC", "NFS", "made"]
