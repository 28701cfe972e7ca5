"""Whether a batch holds any frame the storage trackers must see: one test on its records, before their own
picks (nvme, rpcrdma, smbdirect and iser's `storage_rows`), which cost 0.5 ms a batch when each reads its
columns and SEND payloads itself.  A batch of RC traffic before any storage protocol showed up passes none."""

import numpy as np

from ibwire.decode import records as R
from ibwire.decode.nvme import CM_CLASS
from ibwire.decode.rcdata import RC_DATA
from ibwire.decode.rpcrdma import RC_SEND, may_be_rpcrdma
from ibwire.decode.smbdirect import may_be_smbdirect

WHOLE = R.F_BTH | R.F_TRUNCATED  # of these flags a whole BTH packet has only F_BTH
SENDS = np.zeros(256, bool)  # the RC SENDs send_heads reads
SENDS[list(RC_SEND)] = True
SENDS &= RC_DATA
HEAD = 16  # the fewest payload bytes either heuristic reads (SMB Direct's need more: asking fewer is safe)


def storage_possible(batch, rows: np.ndarray, trackers) -> bool:
    """False only when no tracker has begun (no NVMe-oF queue known or declared, no RPC-RDMA, SMB Direct or
    iSER seen), no row is an RDMA-CM MAD and no whole RC SEND's first bytes could pass RPC-RDMA's or SMB
    Direct's heuristic: then every tracker's `storage_rows` picks none of `rows`."""
    parts = [getattr(trackers, k, None) for k in ("rpcrdma", "smbdirect", "iser")]
    if trackers.active or any(t is not None and t.seen for t in parts):
        return True
    rec = batch.rec
    every = len(rows) == len(rec)  # (`rows` ascending: all of them, read a column at a time without copies)
    flags = rec["flags"] if every else rec["flags"][rows]
    mad = np.flatnonzero(flags & R.F_MAD)
    if len(mad) and (rec["mad_class"][rows[mad]] == CM_CLASS).any():
        return True
    if parts[0] is None and parts[1] is None:
        return False
    send = rows[SENDS[rec["opcode"] if every else rec["opcode"][rows]] & ((flags & WHOLE) == R.F_BTH)]
    send = send[rec["paylen"][send] >= HEAD]
    if not len(send):
        return False
    end = np.asarray(batch.pos.data)[send] + rec["caplen"][send] - 4 - rec["padcnt"][send]
    end -= np.where((rec["link"][send] == R.IB) | (rec["link"][send] == R.IBGRH), 2, 0)
    heads = np.asarray(batch.buf)[(end - rec["paylen"][send]).astype(np.int64)[:, None] + np.arange(8)]
    return bool(may_be_rpcrdma(heads).any() or may_be_smbdirect(heads).any())
