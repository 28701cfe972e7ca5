"""The detail path: one frame -> scapy layers -> Wireshark-named fields, a summary line and errors
(ibwire.decode.frame).  Loaded on first use, so commands that only read compiled records never import scapy.

The compiled part (`_native`, built from native/*.c: walk, decoder, group-by, renderer) is checked here, once
for every module that uses it: without it, one sentence says how to rebuild."""

from ibwire.errors import UserError

try:
    from ibwire.decode import _native  # noqa: F401  (the compiled part; checked here for every module using it)
except ImportError as e:
    raise UserError(
        f"ibwire's compiled part is missing or broken ({e}); rebuild it with `pip install -e .` "
        "on a machine with gcc, zlib1g-dev and python3-dev (`./dev demo` installs them)"
    ) from None

__all__ = ["Decoded", "decode_frame", "dissect", "LINKTYPES"]


def __getattr__(name):
    if name in __all__:
        from ibwire.decode import frame

        return getattr(frame, name)
    raise AttributeError(f"module 'ibwire.decode' has no attribute {name!r}")
