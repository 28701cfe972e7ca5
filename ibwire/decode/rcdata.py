"""The RC packets the storage protocols ride on (every SEND, RDMA WRITE and RDMA READ request or response,
from dissectors/opcodes.py), and which rows of a batch they are, read a column at a time."""

import numpy as np

from dissectors.opcodes import OPCODES
from ibwire.decode import records as R

RC_DATA = np.array(
    [
        c in OPCODES and OPCODES[c].transport == "RC" and OPCODES[c].op in ("send", "write", "read_req", "read_resp")
        for c in range(256)
    ]
)


def rc_data(rec: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Which of `rows` of the records are RC SENDs, RDMA WRITEs and RDMA READs (as a mask over rows)."""
    return ((rec["flags"][rows] & R.F_BTH) > 0) & RC_DATA[rec["opcode"][rows]]
