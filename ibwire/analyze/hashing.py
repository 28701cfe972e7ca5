"""Grouping packets by multi-field keys (addresses, LIDs, QPNs): an exact group-by over record fields in
one compiled hash-table pass (ibwire.decode._native.group); callers rebuild the readable key once per group."""

from typing import Optional, Sequence, Tuple

import numpy as np

from ibwire.decode import _native


def group_rows(
    rec: np.ndarray, fields: Sequence[str], rows: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups of `rec` (or of its records listed in `rows`) with equal values in `fields`: a 64-bit hash
    of each group's key, each group's first row and each row's group (positions count within `rows`).
    Groups are numbered in order of first appearance."""
    rec = np.ascontiguousarray(rec)
    if rows is not None:
        rows = np.ascontiguousarray(rows, np.int64)
    n = len(rec) if rows is None else len(rows)
    inverse, first, hashes = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint64)
    spec = [rec.dtype.fields[f] for f in fields]
    g = _native.group(
        rec,
        rec.dtype.itemsize,
        rows,
        np.array([s[1] for s in spec], np.int64),
        np.array([s[0].itemsize for s in spec], np.int64),
        inverse,
        first,
        hashes,
    )
    return hashes[:g], first[:g], inverse
