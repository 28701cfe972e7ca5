"""Capture backends.  Each yields (timestamp, bytes, wire length) frames, or None on an idle tick so the
session can check its stop conditions; arming side effects go through the journal first."""
