"""The detail path: one frame -> scapy layers -> Wireshark-named fields, a summary line and errors
(ibwire.decode.frame).  Loaded on first use, so commands that only read compiled records never import scapy."""

__all__ = ["Decoded", "decode_frame", "dissect", "LINKTYPES"]


def __getattr__(name):
    if name in __all__:
        from . import frame

        return getattr(frame, name)
    raise AttributeError(f"module 'ibwire.decode' has no attribute {name!r}")
