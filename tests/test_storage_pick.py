"""decode's one test for whether a batch holds anything for the storage trackers (storagepick) never skips
a frame one of them would pick: wherever it answers no, the trackers' own picks (nvme, rpcrdma, smbdirect and
iser's storage_rows) are empty, on every shipped and public capture read in small batches, all rows and
every other row (as -Y selects), with the trackers fed as decode feeds them.  On RC traffic without storage
(the rxe samples' SENDs, WRITEs and READs) it answers no for every batch."""

from pathlib import Path

import numpy as np
import pytest

from ibwire.cli.decode import _trackers
from ibwire.decode import decode_frame
from ibwire.decode.iser import storage_rows as iser_rows
from ibwire.decode.nvme import storage_rows as nvme_rows
from ibwire.decode.rpcrdma import storage_rows as rpcrdma_rows
from ibwire.decode.smbdirect import storage_rows as smbdirect_rows
from ibwire.decode.storagepick import storage_possible
from ibwire.decode.stream import Stream
from ibwire.report.packets.printer import Printer

ROOT = Path(__file__).resolve().parent.parent
CAPTURES, PUBLIC = ROOT / "captures", ROOT.parent / "shared" / "captures" / "public"
PLAIN_RC = ("rxe-rc-send.pcap", "rxe-rc-write.pcap", "rxe-rc-read.pcap")


def _picks(batch, rows, trackers) -> int:
    phases = nvme_rows(batch.rec, rows, trackers) + iser_rows(batch, rows, trackers)
    phases += rpcrdma_rows(batch, rows, trackers) + smbdirect_rows(batch, rows, trackers)
    return sum(len(p if isinstance(p, np.ndarray) else p()) for p in phases)


def _answers(path: Path, every: int, batch: int) -> list:
    """storage_possible's answer for each batch, checked against the trackers' picks where it says no."""
    trackers = _trackers([])
    printer = Printer("text")
    printer.nvme = trackers
    answers = []
    for b in Stream(str(path), batch=batch):
        rows = np.arange(len(b.rec))[::every]

        def details(i, b=b):
            d = decode_frame(b.frame(i))
            trackers.feed(d)
            return d

        possible = storage_possible(b, rows, trackers)
        if not possible:
            assert _picks(b, rows, trackers) == 0, f"{path.name}: a batch skipped that a tracker picks from"
        answers.append(possible)
        printer.batch(b, rows, details)
    return answers


@pytest.mark.parametrize("every,batch", [(1, 16), (2, 64)])
def test_no_batch_a_tracker_wants_is_skipped(every, batch):
    paths = sorted(CAPTURES.glob("*.pcap")) + sorted(PUBLIC.glob("*.pcap"))
    asked = {p.name: _answers(p, every, batch) for p in paths}
    for name in ("nvme-rdma.pcap", "nfs-rdma.pcap", "smb-direct.pcap", "iser-rdma.pcap"):
        assert any(asked[name]), name
    for name in PLAIN_RC:
        assert not any(asked[name]), name
