"""Capture files in, raw frames out: the first room of bytes → link-type reader → records."""
from .capfile import Frame, open_capture, iter_frames

__all__ = ["Frame", "open_capture", "iter_frames"]
