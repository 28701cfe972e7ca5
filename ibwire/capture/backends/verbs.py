"""`verbs` backend: pyverbs RAW_PACKET QP + an IBV_FLOW_ATTR_SNIFFER flow on the port (ibv_create_flow(3)).

Order of operations as libpcap's pcap-rdmasniff.c; pyverbs names from rdma-core pyverbs/*.pyx.  Frames are
polled from the CQ in batches of up to POLL and their buffers re-posted (the session writes them in another
thread); hardware completion timestamps are used when the device offers them.  Drops: completions with an
error status, plus the device's own count of packets it dropped for want of a posted receive buffer
(hw_counters/out_of_buffer, mlx5; sysfs-class-infiniband), read at the start and at every report.
pyverbs is imported lazily: the rest of ibwire never needs it.
"""

import errno
import os
import sys
import time

from dissectors.numbers import LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND
from ibwire.capture import sysfs
from ibwire.errors import UserError

SLOT = 10240
RING = 512
POLL = 256
DISTRO_PATH = "/usr/lib/python3/dist-packages"


def import_pyverbs():
    """pyverbs from this environment, else the distribution's (python3-pyverbs) when it matches this Python."""
    try:
        import pyverbs.device  # noqa: F401

        return
    except ImportError:
        pass
    so = os.path.join(
        DISTRO_PATH,
        "pyverbs",
        f"device.cpython-{sys.version_info[0]}{sys.version_info[1]}-{sys.implementation._multiarch}.so",
    )
    if os.path.exists(so) and DISTRO_PATH not in sys.path:
        sys.path.append(DISTRO_PATH)
        try:
            import pyverbs.device  # noqa: F401

            return
        except ImportError:
            pass
    raise UserError(
        "the verbs backend needs pyverbs; install python3-pyverbs (Debian/Ubuntu) or rdma-core's "
        "pyverbs for this Python"
    )


def _netdev(device: str):
    """The netdev a RoCE device (Soft-RoCE rxe, a ConnectX Ethernet port) sends through; None on IB."""
    try:
        with open(f"/sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/0") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _rdma_error(e, device: str, what: str) -> UserError:
    code = getattr(e, "error_code", None)
    if code == errno.EPERM or code == errno.EACCES:
        return UserError(f"{what} on {device} needs CAP_NET_RAW; run as root")
    if code in (errno.EOPNOTSUPP, errno.ENOSYS, errno.ENXIO):
        ndev = _netdev(device)
        return UserError(
            f"{device} does not support the verbs sniffer ({what} refused: {os.strerror(code)}); "
            + (f"capture its netdev with --backend netdev -i {ndev}" if ndev else "on IB ports use --backend ibdump")
        )
    if code == errno.EINVAL:
        return UserError(f"{device} rejected {what} (EINVAL: wrong port or no raw-packet support)")
    return UserError(f"{what} on {device} failed: {e}")


class Verbs:
    name = "verbs"

    def __init__(self, device: str, port: int):
        self.device, self.port = device, port
        self.drops = 0
        self.notes = []
        self.objs = []
        self.oob_start = self._out_of_buffer()

    def _out_of_buffer(self):
        """The device's count of packets dropped because no receive buffer was posted, None if it has none."""
        v = sysfs.read(
            sysfs.sysfs_root()
            / "class"
            / "infiniband"
            / self.device
            / "ports"
            / str(self.port)
            / "hw_counters"
            / "out_of_buffer"
        )
        return int(v) if v and v.isdigit() else None

    def arm(self, journal):
        import_pyverbs()
        import pyverbs.device as d
        from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError

        try:
            names = [x.name.decode() if isinstance(x.name, bytes) else x.name for x in d.get_device_list()]
        except PyverbsRDMAError:
            raise UserError(
                "this kernel has no RDMA support (libibverbs found no RDMA subsystem), so the verbs "
                "sniffer cannot run; use --backend netdev on a kernel interface or `ibwire lab`"
            ) from None
        if self.device not in names:
            raise UserError(f"no RDMA device named {self.device} (found: {', '.join(names) or 'none'})")
        journal.record(f"verbs sniffer flow on {self.device} port {self.port} (released when the process exits)")
        try:
            self._open()
        except PyverbsRDMAError as e:
            self._close_objs()
            raise _rdma_error(e, self.device, "creating the sniffer") from None
        except PyverbsError as e:
            self._close_objs()
            raise UserError(f"the verbs sniffer on {self.device} could not start: {e}") from None

    def _open(self):
        import pyverbs.enums as e
        from pyverbs.device import Context
        from pyverbs.flow import Flow, FlowAttr
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
        from pyverbs.wr import SGE, RecvWR

        self.ctx = Context(name=self.device)
        self.objs.append(self.ctx)
        pattr = self.ctx.query_port(self.port)
        self.is_ib = pattr.link_layer != e.IBV_LINK_LAYER_ETHERNET

        self.linktype = LINKTYPE_INFINIBAND if self.is_ib else LINKTYPE_ETHERNET
        self.pd = PD(self.ctx)
        self.cq = self._cq(e)
        self.qp = QP(
            self.pd,
            QPInitAttr(
                qp_type=e.IBV_QPT_RAW_PACKET,
                scq=self.cq,
                rcq=self.cq,
                cap=QPCap(max_send_wr=1, max_recv_wr=RING, max_send_sge=1, max_recv_sge=1),
            ),
            QPAttr(port_num=self.port),
        )
        self.mr = MR(self.pd, RING * SLOT, e.IBV_ACCESS_LOCAL_WRITE)
        self.objs += [self.pd, self.cq, self.qp, self.mr]
        self._RecvWR, self._SGE = RecvWR, SGE
        for i in range(RING):
            self._post(i)
        self.flow = Flow(
            self.qp, FlowAttr(num_of_specs=0, flow_type=e.IBV_FLOW_ATTR_SNIFFER, priority=0, port=self.port, flags=0)
        )
        self.objs.append(self.flow)
        self.notes.append(
            f"sniffer flow armed on {self.device} port {self.port}"
            + (" with hardware timestamps" if self.hw_ts else "")
            + (
                "; drops from its out_of_buffer counter"
                if self.oob_start is not None
                else "; the device has no out_of_buffer counter, so ring overruns cannot be counted"
            )
        )

    def _cq(self, e):
        """A CQ with completion timestamps when the device offers them, else a plain CQ."""
        from pyverbs.cq import CQ

        self.hw_ts = False
        try:
            from pyverbs.cq import CQEX, CqInitAttrEx

            flags = e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
            cq = CQEX(self.ctx, CqInitAttrEx(cqe=RING, wc_flags=flags))
            self.hw_ts = True
            return cq
        except Exception:  # not offered by this device or pyverbs build: fall back
            return CQ(self.ctx, RING, None, None, 0)

    def _post(self, i: int):
        self.qp.post_recv(self._RecvWR(wr_id=i, num_sge=1, sg=[self._SGE(self.mr.buf + i * SLOT, SLOT, self.mr.lkey)]))

    def frames(self):
        from pyverbs.cq import PollCqAttr

        while True:
            got = 0
            if self.hw_ts:
                try:
                    self.cq.start_poll(PollCqAttr())
                except Exception:  # ENOENT: nothing to poll
                    yield None
                    time.sleep(0.001)
                    continue
                while True:
                    got += 1
                    wr, status, n = self.cq.wr_id, self.cq.status, self.cq.read_byte_len()
                    ts = self.cq.read_completion_wallclock_ns() / 1e9
                    if status == 0:
                        yield ts, self.mr.read(n, wr * SLOT), n
                    else:
                        self.drops += 1
                    self._post(wr)
                    try:
                        self.cq.poll_next()
                    except Exception:
                        break
                self.cq.end_poll()
                continue
            npolled, wcs = self.cq.poll(num_entries=POLL)
            if not npolled:
                yield None
                time.sleep(0.001)
                continue
            now = time.time()
            for wc in wcs:
                if wc.status == 0:
                    yield now, self.mr.read(wc.byte_len, wc.wr_id * SLOT), wc.byte_len
                else:
                    self.drops += 1
                self._post(wc.wr_id)

    def backend_drops(self) -> int:
        now = self._out_of_buffer()
        return self.drops + (now - self.oob_start if now is not None and self.oob_start is not None else 0)

    def _close_objs(self):
        for o in reversed(self.objs):
            try:
                o.close()
            except Exception:  # already closed by its parent
                pass
        self.objs = []

    def close(self):
        self._close_objs()
