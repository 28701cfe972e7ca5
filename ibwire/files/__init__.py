"""Capture files in, raw frames out: the first room of bytes → link-type reader → records."""

from ibwire.files.capfile import Frame, iter_frames, open_capture

__all__ = ["Frame", "open_capture", "iter_frames"]
