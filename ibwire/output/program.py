"""Line programs: literal text and record-field formats, compiled for the compiled renderer.

A program is a list of parts: a str is literal text; a tuple `(op, field, arg, width)` prints a RECORD
field (`udec`, `idec`, `hex` with `arg` minimum digits, `time`/`date` on `time_ns` with `arg` decimals,
`addr` (width 1: always IPv6), `mac`, `span`: an i8 duration in ns as seconds with `arg` decimals).  `render` prints many rows, each with its own program, in one compiled call
(native/render.c, whose opcodes these are).
"""

import struct
from typing import List, Sequence

import numpy as np

from ..fast import _native
from ..fast import records as R

OPS = {"lit": 0, "udec": 1, "idec": 2, "hex": 3, "time": 4, "date": 5, "addr": 6, "mac": 7, "span": 8}


def compile_parts(parts: Sequence) -> bytes:
    out, text = bytearray(), []

    def flush():
        if text:
            b = "".join(text).encode()
            for i in range(0, len(b), 0xFFFF):
                chunk = b[i : i + 0xFFFF]
                out.extend(struct.pack("<BH", 0, len(chunk)) + chunk)
            text.clear()

    for p in parts:
        if isinstance(p, str):
            text.append(p)
            continue
        flush()
        op, field, arg, width = (tuple(p) + (0, 0))[:4]
        dt, off = R.RECORD.fields[field][:2]
        if op in ("udec", "idec", "hex"):
            arg = arg if op == "hex" else dt.itemsize
            size = dt.itemsize
            out.extend(struct.pack("<BHBB", OPS[op], off, size, arg if op == "hex" else width))
            continue
        out.extend(struct.pack("<BHBB", OPS[op], off, arg, width))
    flush()
    return bytes(out)


def render(rec: np.ndarray, rows: np.ndarray, prog_of: np.ndarray, programs: List[bytes], base=None) -> bytes:
    """The text of rec[rows[k]] printed by programs[prog_of[k]]; time formats subtract base[k] (int64 ns)."""
    rec = np.ascontiguousarray(rec)
    return _native.render(
        rec,
        rec.dtype.itemsize,
        np.ascontiguousarray(rows, np.int64),
        np.ascontiguousarray(prog_of, np.int32),
        tuple(programs),
        None if base is None else np.ascontiguousarray(base, np.int64),
    )
