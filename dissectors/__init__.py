"""Scapy layers for InfiniBand and RoCE: pure protocol definitions, importable with scapy alone.

`from dissectors import BTH, RETH` gives the transport headers and registers every binding (RoCEv1
ethertype, RoCEv2 UDP port, LRH/GRH next headers, ERF, IPoIB, MADs).  The layers load on first use,
so `dissectors.opcodes` and `dissectors.crc` stay cheap for the bulk path, which needs no scapy.
"""

from dissectors.opcodes import OPCODES, lookup

__all__ = [
    "OPCODES",
    "lookup",
    "LRH",
    "GRH",
    "BTH",
    "RDETH",
    "DETH",
    "XRCETH",
    "RETH",
    "AtomicETH",
    "AETH",
    "AtomicAckETH",
    "ImmDt",
    "IETH",
    "FETH",
    "CNPPadding",
    "DCExt",
    "IBPad",
    "ICRC",
    "VCRC",
    "EXT_HEADERS",
    "ERF",
    "IBLink",
    "IPoIB",
    "IPoIBLink",
    "RWH",
    "looks_like_roce2",
    "MACControl",
    "MACControlPause",
    "MACControlPFC",
    "LLDPDUETSConfiguration",
    "LLDPDUETSRecommendation",
    "LLDPDUPFCConfiguration",
    "LLDPDUAppPriority",
    "DCBXApp",
    "LLDPDUCEEDCBX",
]


def __getattr__(name):
    if name in __all__:
        from dissectors import layers

        return getattr(layers, name)
    raise AttributeError(f"module 'dissectors' has no attribute {name!r}")
