"""Records stored field by field: each field of `records.RECORD` as one contiguous column, the layout Arrow
and Parquet take.  The compiled decoder fills such a block directly (`decode.decode_columns`); records
already decoded are split into one in a single compiled pass (`from_records`)."""

from typing import Dict

import numpy as np

from ibwire.decode import _native
from ibwire.decode.records import RECORD
from ibwire.files.walk import unreferenced

FIELDS = RECORD.names
SIZES = np.array([RECORD.fields[f][0].itemsize for f in FIELDS], np.int64)
STARTS = dict(zip(FIELDS, np.concatenate(([0], np.cumsum(SIZES)[:-1])).tolist()))
ROW_BYTES = int(SIZES.sum())
_OFFSETS = np.array([RECORD.fields[f][1] for f in FIELDS], np.int64)


class Columns:
    """Room for `capacity` rows; column `f` holds its values from byte capacity * STARTS[f] of `buf`.
    `cols[field]` is the column of the `n` rows filled so far (a view, int/float/void as in RECORD)."""

    def __init__(self, capacity: int):
        self.capacity, self.n = capacity, 0
        self.buf = np.zeros(capacity * ROW_BYTES, np.uint8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, field: str) -> np.ndarray:
        dt = RECORD.fields[field][0]
        a = self.capacity * STARTS[field]
        return self.buf[a : a + self.n * dt.itemsize].view(dt)

    def clear(self) -> bool:
        """Empty the block for reuse: False (and left as it is) while a view of its memory is alive."""
        if not unreferenced(self.buf, 1):  # self.buf
            return False
        self.buf.fill(0)
        self.n = 0
        return True

    def columns(self) -> Dict[str, np.ndarray]:
        return {f: self[f] for f in FIELDS}


def from_records(rec: np.ndarray) -> Columns:
    """The records of `rec` as a block of columns (one compiled pass: each record is read once)."""
    rec = np.ascontiguousarray(rec)
    cols = Columns(len(rec))
    _native.columns(rec, rec.dtype.itemsize, _OFFSETS, SIZES, cols.buf)
    cols.n = len(rec)
    return cols
