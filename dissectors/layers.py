"""Every layer and binding in one import (what `dissectors.<Layer>` loads on first use)."""

# ruff: noqa: I001, F401  (re-exports, in the order scapy is to learn the bindings)
from dissectors.ib import (
    AETH,
    BTH,
    DETH,
    EXT_HEADERS,
    FETH,
    GRH,
    ICRC,
    IETH,
    LRH,
    RDETH,
    RETH,
    VCRC,
    XRCETH,  # noqa: F401
    AtomicAckETH,
    AtomicETH,
    CNPPadding,
    DCExt,
    IBPad,
    ImmDt,
)
from dissectors.encap import ERF, IBLink, IPoIB, IPoIBLink, RWH, looks_like_roce2  # noqa: F401
from dissectors.dcb import (
    DCBXApp,
    LLDPDUAppPriority,
    LLDPDUETSConfiguration,
    LLDPDUETSRecommendation,  # noqa: F401
    LLDPDUCEEDCBX,
    LLDPDUPFCConfiguration,
    MACControl,
    MACControlPause,
    MACControlPFC,
)
from dissectors import payloads  # noqa: F401  (registers the payload dispatch: MADs, IPoIB)
