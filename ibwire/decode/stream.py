"""A capture as a stream of record batches with their raw bytes, and display-filter selection on it.

Records come from the compiled decoder (ibwire.decode.scan); a frame's bytes stay reachable while its batch is
current, so a frame the records cannot answer for (a field they lack, a damaged or heuristic frame) is
decoded in full (`decode_frame`) — and only that frame.
"""

from typing import Callable, Iterator, NamedTuple, Optional

import numpy as np

from ibwire.files import Frame


class Batch(NamedTuple):
    rec: np.ndarray  # ibwire.decode.records.RECORD rows
    pos: object  # ibwire.files.walk.Positions of the rows in `buf`
    buf: np.ndarray  # the chunk the batch was read in (the walk gives each chunk a buffer of its own)

    def frame(self, i: int) -> Frame:
        p = self.pos
        start, n = int(p.data[i]), int(p.caplen[i])
        return Frame(
            int(self.rec["frame"][i]),
            float(self.rec["time"][i]),
            n,
            int(p.wirelen[i]),
            int(p.linktype[i]),
            self.buf[start : start + n].tobytes(),
            None if p.iface is None else int(p.iface[i]),
        )

    def data(self, i: int) -> bytes:
        start = int(self.pos.data[i])
        return self.buf[start : start + int(self.pos.caplen[i])].tobytes()


def decimals_of(head: bytes) -> int:
    """Digits after the second that the capture's timestamps carry, as tshark prints them: 9 for a
    nanosecond pcap or a pcapng interface finer than microseconds (if_tsresol), else 6."""
    import struct

    from ibwire.files.formats import PCAP_MAGICS, PCAPNG_SHB, if_tsresol

    if head[:4] in PCAP_MAGICS:
        return 9 if PCAP_MAGICS[head[:4]][1] == 1e-9 else 6
    if head[:4] != PCAPNG_SHB or len(head) < 12:
        return 6
    endian = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    off = 0
    while off + 12 <= len(head):
        btype, blen = struct.unpack_from(endian + "II", head, off)
        if blen < 12:
            break
        if btype == 1:
            num, den = if_tsresol(head[off + 16 : off + blen - 4], endian)
            return 9 if num < den * 1000 else 6
        off += blen
    return 6


class Stream:
    """Iterate for Batches; `problems` lists file damage once iteration is done."""

    def __init__(self, path: str, icrc: bool = True, batch: int = 16384):
        from ibwire.files.walk import CaptureWalk

        self.walk = CaptureWalk(path, batch, keep=True)
        self.icrc = icrc
        self.fill = None  # completes each batch's records (the RC analysis columns), when set
        with open(path, "rb") as f:
            self.decimals = decimals_of(f.read(1 << 16))

    @property
    def problems(self):
        return self.walk.problems

    def __iter__(self) -> Iterator[Batch]:
        """Reading, walking and decoding run one batch ahead on a second thread (the file reads, the
        compiled walk and the decoder release the GIL), so they overlap what the consumer does with each
        batch (print, filter, audit); the walk reads each chunk into a buffer of its own, so a batch's
        bytes stay valid however far the read-ahead gets."""
        from ibwire.decode.batch import decode_batch
        from ibwire.files.ahead import map_ahead

        def decoded(item):
            pos, buf = item
            rec = decode_batch(buf, pos, self.icrc)
            if self.fill:
                self.fill(rec)
            return Batch(rec, pos, buf)

        return map_ahead(decoded, ((pos, self.walk.buf) for pos in self.walk.batches()))


def with_analysis(d, row):
    """The full decode `d` of a record's frame, given the record's RC analysis fields (decode.records.ANALYSIS):
    in its field map, and as a `bth.analysis` layer of its own."""
    from ibwire.decode.records import analysis_values

    values = analysis_values(row)
    if values:
        d.flat.update(values)
        d.layers["bth.analysis"] = {k[len("bth.analysis.") :]: v for k, v in values.items()}
    return d


def detail_flat(frame: Frame, t0: float, prev: Optional[float], rmpp=None, nvme=None, documents=None, ns=0) -> dict:
    """The full decode's field map of one frame, with the times relative to the capture's first frame
    and to the previous one (and, fed to `rmpp`, the SA table an RMPP transfer's last segment completes);
    its tcp.* and icmp.* fields those `documents(decoded, ns)` gives (tshark's, ibwire.decode.docfields), `ns`
    the frame's time since the epoch."""
    from ibwire.decode import decode_frame

    d = decode_frame(frame)
    if rmpp is not None:
        rmpp.feed(d)
    if nvme is not None:
        nvme.feed(d)
    flat = d.flat
    if documents is not None:
        flat.update(documents(d, ns))
    flat["frame.time_relative"] = frame.time - t0
    flat["frame.time_delta"] = frame.time - (frame.time if prev is None else prev)
    return flat


def select(stream, flt, detail: Callable = None, nvme=None, documents: Callable = None) -> Iterator[tuple]:
    """(batch, mask) for every batch of `stream`: which frames the display filter `flt` selects.  The
    records answer where they can (ibwire.decode.record_filter); the full decode answers the rest, frame by frame.
    `detail(batch, i, t0, prev)` gives a frame's field map (default: detail_flat of its bytes, fed to the
    NVMe-oF tracker `nvme` when given; with the tcp.* and icmp.* fields `documents` gives, frame after frame)."""
    from ibwire.decode.record_filter import batch_filter

    bf = batch_filter(flt, with_bytes=True)
    if detail is None:
        from ibwire.decode.rmpp import RmppTracker

        rmpp = RmppTracker()

        def detail(batch, i, t0, prev):
            from ibwire.decode.records import analysis_values

            flat = detail_flat(batch.frame(i), t0, prev, rmpp, nvme, documents, int(batch.rec["time_ns"][i]))
            return {**flat, **analysis_values(batch.rec[i])}

    t0, prev = None, None
    for batch in stream:
        rec = batch.rec
        if not len(rec):
            continue
        if t0 is None:
            t0 = float(rec["time"][0])
        times = rec["time"]
        if bf is not None:
            mask, sure = bf(rec, t0, prev, batch.data)
            todo = np.flatnonzero(~sure)
        else:
            mask, todo = np.zeros(len(rec), bool), range(len(rec))
        if nvme is not None:  # the tracker sees every frame it needs (RDMA-CM first)
            from ibwire.decode.nvme import storage_rows

            cm, data = storage_rows(rec, np.arange(len(rec)), nvme)
            for i in cm.tolist():
                mask[i] = flt(detail(batch, i, t0, float(times[i - 1]) if i else prev))
            todo = np.setdiff1d(np.union1d(todo, data()), cm)
            from ibwire.decode.rpcrdma import storage_rows as rpcrdma_rows
            from ibwire.decode.smbdirect import storage_rows as smbdirect_rows

            every = np.arange(len(rec))
            for more in rpcrdma_rows(batch, every, nvme) + smbdirect_rows(batch, every, nvme):
                todo = np.union1d(todo, more)
        if nvme is not None:  # iSER: its rows asked once the RDMA-CM rows were fed
            from ibwire.decode.iser import storage_rows as iser_rows

            for more in iser_rows(batch, np.arange(len(rec)), nvme):
                todo = np.union1d(todo, more())
        for i in todo:
            i = int(i)
            mask[i] = flt(detail(batch, int(i), t0, float(times[i - 1]) if i else prev))
        prev = float(times[-1])
        yield batch, mask
