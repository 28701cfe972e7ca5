import os
import struct
from types import SimpleNamespace

from .mr import MEMORY
from .qp import POSTED


def _frames(path):
    with open(path, "rb") as f:
        data = f.read()
    off = 24
    while off + 16 <= len(data):
        n = struct.unpack_from("<I", data, off + 8)[0]
        yield data[off + 16:off + 16 + n]
        off += 16 + n


class CqInitAttrEx:
    def __init__(self, **kw):
        pass


class CQEX:
    def __init__(self, *a, **kw):
        raise OSError("no completion timestamps on this device")


class PollCqAttr:
    pass


class CQ:
    def __init__(self, ctx, cqe, cq_context, channel, comp_vector):
        self.left = _frames(os.environ["STANDIN_VERBS_PCAP"])
        self.done = False

    def poll(self, num_entries=1):
        wcs = []
        while len(wcs) < num_entries and POSTED:
            frame = next(self.left, None)
            if frame is None:
                break
            wr = POSTED.pop(0)
            mr = MEMORY["mr"]
            off = wr.sg[0].addr - mr.buf
            mr.mem[off:off + len(frame)] = frame
            wcs.append(SimpleNamespace(wr_id=wr.wr_id, status=0, byte_len=len(frame)))
        if not wcs and not self.done:
            self.done = True
            path = os.environ["STANDIN_VERBS_OOB_FILE"]
            with open(path) as f:
                now = int(f.read())
            with open(path, "w") as f:
                f.write(str(now + int(os.environ["STANDIN_VERBS_OOB"])))
        return len(wcs), wcs

    def close(self):
        pass
