"""The fast path: capture file → batches of compact per-packet records, with no per-packet objects.

`scan(path)` yields numpy structured arrays of `records.RECORD`, filled by the compiled decoder in
`native/` (built as `_native`); analyzers consume them batch by batch so memory stays flat however large
the capture is.  scapy stays the path for `decode -V` and crafting.
"""

from typing import TYPE_CHECKING, Iterator

import numpy as np

from ibwire.decode.batch import decode_batch
from ibwire.files.walk import CaptureWalk

if TYPE_CHECKING:
    from ibwire.decode.columns import Columns


class Scan:
    """Iterate for record batches; `problems` lists file damage, `bytes_done`/`size` drive progress bars.
    `fill(rec)`, when set, completes each batch or block before it is handed on (the RC analysis columns)."""

    def __init__(self, path: str, icrc: bool = True, batch: int = 16384, span=None):
        self.walk = CaptureWalk(path, batch, span=span)
        self.icrc = icrc
        self.fill = None

    @property
    def problems(self):
        return self.walk.problems

    @property
    def size(self) -> int:
        return self.walk.size

    @property
    def bytes_done(self) -> int:
        return self.walk.bytes_done

    def __iter__(self) -> Iterator[np.ndarray]:
        for pos in self.walk.batches():
            rec = decode_batch(self.walk.buf, pos, self.icrc)
            if self.fill:
                self.fill(rec)
            yield rec

    def columns(self, rows: int, spare: list = None) -> Iterator["Columns"]:
        """Blocks of at most `rows` packets (and at least `rows` less one batch, but the last), each
        decoded straight into columns (`decode.columns`), the layout Arrow takes.  `spare`: blocks the
        consumer is done with (it appends them), filled again rather than new ones made."""
        from ibwire.decode.batch import decode_columns
        from ibwire.decode.columns import Columns

        rows = max(rows, self.walk.batch)

        def block():
            while spare:
                c = spare.pop()
                if c.capacity == rows and c.clear():
                    return c
            return Columns(rows)

        cols = block()
        for pos in self.walk.batches():
            if cols.n + len(pos.data) > rows:
                yield self._filled(cols)
                cols = block()
            decode_columns(self.walk.buf, pos, cols, self.icrc)
        if cols.n:
            yield self._filled(cols)

    def _filled(self, cols):
        if self.fill:
            self.fill(cols)
        return cols


def scan(path: str, icrc: bool = True, batch: int = 16384, span=None) -> Scan:
    """Record batches of a capture; `span` restricts a pcap file to a byte range (see files.split)."""
    return Scan(path, icrc, batch, span)


def read_all(path: str, icrc: bool = True) -> np.ndarray:
    """Every record of a (small) capture in one array; use `scan` for large ones."""
    from ibwire.decode.records import join

    return join(list(scan(path, icrc)))
