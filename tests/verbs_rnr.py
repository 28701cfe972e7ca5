"""An RC pair over RDMA-CM whose receiver never posts a receive, for the RNR test of tests/test_lab_rdma.py; run
inside a lab guest with Debian's python3 (pyverbs).  Both sides ask for `rnr_retry` RNR retries (RDMA-CM gives
each QP the count its peer asked for, cm.c).

    verbs_rnr.py server IP PORT RNR_RETRY   accepts one connection and waits (killed by the test)
    verbs_rnr.py client IP PORT RNR_RETRY   sends one message and prints its completion status
"""

import sys
import time

import pyverbs.cm_enums as ce
from pyverbs.cmid import CMID, AddrInfo, ConnParam
from pyverbs.qp import QPCap, QPInitAttr


def main(role: str, ip: str, port: str, rnr_retry: str) -> None:
    param = ConnParam(rnr_retry=int(rnr_retry))
    if role == "server":
        where = AddrInfo(src=ip, src_service=port, port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
        listener = CMID(creator=where, qp_init_attr=QPInitAttr(cap=QPCap(max_recv_wr=1)))
        listener.listen()
        conn = listener.get_request()
        conn.accept(param)  # and no receive is ever posted
        print("accepted", flush=True)
        time.sleep(600)
        return
    where = AddrInfo(dst=ip, dst_service=port, port_space=ce.RDMA_PS_TCP)
    conn = CMID(creator=where, qp_init_attr=QPInitAttr(cap=QPCap(max_send_wr=1)))
    conn.connect(param)
    msg = conn.reg_msgs(64)
    conn.post_send(msg)
    wc = conn.get_send_comp()
    print("status", wc.status, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
