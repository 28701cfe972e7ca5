"""64-bit row hashes over record columns, so numpy can group packets by multi-field keys (addresses,
LIDs, QPNs) with one np.unique on integers; the readable key is rebuilt once per distinct hash."""
import numpy as np

_MUL = np.uint64(0x9E3779B97F4A7C15)


def row_hash(*cols: np.ndarray) -> np.ndarray:
    """A 64-bit hash per row of the given columns (void columns are split into 8-byte words)."""
    h = np.zeros(len(cols[0]), np.uint64)
    with np.errstate(over="ignore"):
        for c in cols:
            if c.dtype.kind == "V":
                raw = np.ascontiguousarray(c).view(np.uint8).reshape(len(c), -1)
                if raw.shape[1] != 16:
                    full = np.zeros((len(c), 16), np.uint8)
                    full[:, :raw.shape[1]] = raw
                    raw = full
                words = raw.view(np.uint64)
                parts = (words[:, 0], words[:, 1])
            else:
                parts = (c.astype(np.uint64),)
            for w in parts:
                h = (h ^ w) * _MUL
                h ^= h >> np.uint64(29)
    return h
