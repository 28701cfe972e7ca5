"""Line programs: literal text and record-field formats, compiled for the compiled renderer.

A program is a list of parts: a str is literal text; a tuple `(op, field, arg, width)` prints a RECORD
field (`udec`, `idec`, `hex` with `arg` minimum digits, `time`/`date` on `time_ns` with `arg` decimals,
`addr` (width 1: always IPv6), `mac`, `span`: an i8 duration in ns as seconds with `arg` decimals, `repr`:
an i8 of ns as Python's repr() of its seconds).  A
tuple whose op starts with "f" reads the row's frame bytes (positions below 0 count back from its end):
`("fint", at, nbytes, shift, nbits, digits)` a big-endian bit field (little-endian: nbytes | 0x80), decimal or
`digits` hex digits;
`("fhex", at, stop, sep)` the bytes at..stop as hex pairs joined by `sep`; `("fip4" | "fip6" | "fmac", at)`.
`render` prints many rows, each with its own program, in one compiled call (native/render.c, whose opcodes
these are).
"""

import struct
from typing import List, Sequence

import numpy as np

from ibwire.decode import _native
from ibwire.decode import records as R

OPS = {"lit": 0, "udec": 1, "idec": 2, "hex": 3, "time": 4, "date": 5, "addr": 6, "mac": 7, "span": 8, "repr": 9}
FRAME_OPS = {"fint": 10, "fhex": 11, "fip4": 12, "fip6": 13, "fmac": 14}

# A frame's numbers besides its bytes, as the printer knows them per row: its number; ns since the epoch,
# the previous frame, the previous frame shown, the first frame; udp.stream, ns since the stream's first and
# previous frames; frame.interface_id (ERF); then the record's RC analysis columns.
META = ("frame", "epoch", "delta", "delta_displayed", "relative", "stream", "stream_relative", "stream_delta")
AUX = np.dtype(
    [(name, "i8") for name in META + ("interface", "epoch_ms")] + [(col, R.RECORD[col]) for col in R.ANALYSIS]
)  # epoch_ms: epoch // 10**6, -T ek's "timestamp"


def _position(at: int) -> int:
    """A frame position as render.c reads it: bit 15 set counts back from the frame's end."""
    if not -0x7FFF <= at <= 0x7FFF:
        raise ValueError(f"frame position {at} out of range")
    return at if at >= 0 else 0x8000 | -at


def _frame_op(p: tuple) -> bytes:
    op, at, *rest = p
    if op == "fhex":
        stop, sep = rest
        stop = _position(stop)
        rest = [0, stop & 0xFF, stop >> 8, ord(sep) if sep else 0]
    return struct.pack("<BH4B", FRAME_OPS[op], _position(at), *(list(rest) + [0, 0, 0, 0])[:4])


def compile_parts(parts: Sequence, dtype: np.dtype = R.RECORD) -> bytes:
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
        if p[0] in FRAME_OPS:
            out.extend(_frame_op(p))
            continue
        op, field, arg, width = (tuple(p) + (0, 0))[:4]
        dt, off = dtype.fields[field][:2]
        if op in ("udec", "idec", "hex"):
            arg = arg if op == "hex" else dt.itemsize
            size = dt.itemsize
            out.extend(struct.pack("<BHBB", OPS[op], off, size, arg if op == "hex" else width))
            continue
        out.extend(struct.pack("<BHBB", OPS[op], off, arg, width))
    flush()
    return bytes(out)


def render(
    rec: np.ndarray,
    rows: np.ndarray,
    prog_of: np.ndarray,
    programs: List[bytes],
    base=None,
    frames=None,
    dumps: bool = False,
) -> bytes:
    """The text of rec[rows[k]] printed by programs[prog_of[k]]; time formats subtract base[k] (int64 ns);
    frame ops read row k's frame: `frames` = (buf, start, length), start[k] and length[k] per printed row.
    `dumps`: a -V marker line of a payload's hex (ibwire.report.packets.tree.DUMP_MARK) is printed as tshark's
    hex dump of those bytes straight from the frame (native/render.c)."""
    rec = np.ascontiguousarray(rec)
    more = (None, None, None)
    if frames is not None:
        buf, start, length = frames
        more = (buf, np.ascontiguousarray(start, np.int64), np.ascontiguousarray(length, np.int64))
    return _native.render(
        rec,
        rec.dtype.itemsize,
        np.ascontiguousarray(rows, np.int64),
        np.ascontiguousarray(prog_of, np.int32),
        tuple(programs),
        None if base is None else np.ascontiguousarray(base, np.int64),
        *more,
        dumps,
    )


SPLIT_ROWS = 256  # batches of at least this many rows render in two halves at once (render_halves)


def render_halves(
    rec: np.ndarray, prog_of: np.ndarray, programs: List[bytes], frames, dumps: bool, pool
) -> List[bytes]:
    """render() of every row of `rec` (row k by programs[prog_of[k]], frame k of `frames`), as texts to write one
    after the other: with a `pool` (concurrent.futures, one thread) a batch of SPLIT_ROWS rows or more renders in
    two halves at once, its second half on the pool's thread (the compiled renderer releases the GIL); the
    halves are not joined, which would copy the batch's text once more."""
    n = len(prog_of)
    if pool is None or n < SPLIT_ROWS:
        return [render(rec, np.arange(n), prog_of, programs, None, frames, dumps)]
    h = n // 2
    buf, start, length = frames
    later = pool.submit(render, rec, np.arange(h, n), prog_of[h:], programs, None, (buf, start[h:], length[h:]), dumps)
    return [render(rec, np.arange(h), prog_of[:h], programs, None, (buf, start[:h], length[:h]), dumps), later.result()]


def valid(program: bytes, dtype: np.dtype = AUX) -> bool:
    """Is `program` one compile_parts could have made for rows of `dtype` (a program read back from a file,
    ibwire.report.packets.learned_store): every op known, whole and inside the row, as render.c reads it?"""
    p, n, at = program, len(program), 0
    while at < n:
        op = p[at]
        if at + 3 > n:
            return False
        if op == 0:
            at += 3 + (p[at + 1] | p[at + 2] << 8)
        elif op in FRAME_OPS.values():
            if at + 7 > n or (
                op == FRAME_OPS["fint"]
                and not (1 <= p[at + 3] & 0x7F <= 8 and p[at + 4] < 64 and p[at + 5] <= 64 and p[at + 6] <= 16)
            ):
                return False
            at += 7
        elif op in OPS.values():
            if at + 5 > n:
                return False
            off, a, w = p[at + 1] | p[at + 2] << 8, p[at + 3], p[at + 4]
            integer = op in (OPS["udec"], OPS["idec"], OPS["hex"])
            need = a if integer else 16 if op == OPS["addr"] else 6 if op == OPS["mac"] else 8
            if (a not in (1, 2, 4, 8) if integer else a > 9) or w > 64 or off + need > dtype.itemsize:
                return False
            at += 5
        else:
            return False
    return at == n
