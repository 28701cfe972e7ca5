"""Scapy layers for InfiniBand and RoCE: pure protocol definitions, importable with scapy alone.

`from dissectors import BTH, RETH` gives the transport headers; importing the package registers every
binding (RoCEv1 ethertype, RoCEv2 UDP port, LRH/GRH next headers, ERF, IPoIB, MADs).
"""
from .opcodes import OPCODES, lookup
from .ib import (AETH, BTH, DETH, EXT_HEADERS, FETH, GRH, ICRC, IETH, LRH, RDETH, RETH, VCRC, XRCETH,
                 AtomicAckETH, AtomicETH, CNPPadding, DCExt, IBPad, ImmDt)
from .encap import ERF, IBLink, IPoIB, IPoIBLink, RWH, looks_like_roce2
from . import payloads  # noqa: F401  (registers the UD payload dispatch)

__all__ = [
    "OPCODES", "lookup", "LRH", "GRH", "BTH", "RDETH", "DETH", "XRCETH", "RETH", "AtomicETH", "AETH",
    "AtomicAckETH", "ImmDt", "IETH", "FETH", "CNPPadding", "DCExt", "IBPad", "ICRC", "VCRC", "EXT_HEADERS",
    "ERF", "IBLink", "IPoIB", "IPoIBLink", "RWH", "looks_like_roce2",
]
