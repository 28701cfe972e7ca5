"""ibwire: capture, decode, analyse and audit InfiniBand and RoCE traffic."""
__version__ = "0.1.0"
