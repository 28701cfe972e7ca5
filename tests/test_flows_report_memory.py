"""The flows report keeps a bounded number of packets per conversation drawn (memory stays flat however long
the capture).  Beyond the cap it keeps what is to be marked: every NAK, RNR NAK and bad-ICRC packet, the
frames the sequencer marked (retransmissions, lost, late, after a PSN gap), the request ending each RNR
wait; so the PSN graph of a thinned conversation marks the same drops, retransmissions, NAKs and RNR waits
as the graph of every packet; the page says how much the graphs draw."""

from pathlib import Path

import numpy as np
import pytest

from ibwire.analyze import series as S
from ibwire.analyze.flows import analyse
from ibwire.analyze.frames import marked
from ibwire.report.pictures import flows_report

CAPS = Path(__file__).resolve().parents[1] / "captures"


def _nak_marks(pk):
    syn = S.aeth_kinds(pk["opcode"], pk["aeth_syndrome"])
    return sorted(pk["frame"][(syn == 1) | (syn == 3) | pk["bad_icrc"]].tolist())


@pytest.mark.parametrize("name, cap", [("loss-retransmit.pcap", 40), ("rxe-rc-write-loss2.pcap", 60)])
def test_beyond_the_cap_what_is_marked_is_kept(monkeypatch, name, cap):
    path = str(CAPS / name)
    events: list = []
    res = analyse(path, events=events)
    rows = res["conversations"]
    marks, keep = marked(events[0]), range(len(rows))
    whole = S.collect(path, rows, keep, 0.01, marks)
    monkeypatch.setattr(S, "KEEP_PACKETS", cap)
    capped = S.collect(path, rows, keep, 0.01, marks)
    assert whole.thinned == {} and capped.thinned
    beyond = 0  # marks after the head: what the thinning must keep
    for ci, (kept, seen, _) in capped.thinned.items():
        pk, full = capped.packets[ci], whole.packets[ci]
        assert kept == cap and seen == len(full["frame"]) > cap
        assert pk["frame"][:cap].tolist() == full["frame"][:cap].tolist()  # the head kept whole
        assert len(pk["frame"]) < len(full["frame"])  # the rest thinned
        assert (np.diff(pk["frame"].astype(np.int64)) > 0).all()  # in capture order, once each
        assert _nak_marks(pk) == _nak_marks(full)  # every mark of its own kept
        for side in (0, 1):
            a, b = S.channel(pk, side), S.channel(full, side)
            assert (a is None) == (b is None)
            if a is None:
                continue
            assert a["drop_points"] == b["drop_points"]  # the same drops, same places
            assert a["gap_points"] == b["gap_points"]
            assert a["rnr_waits"] == b["rnr_waits"]
            assert a["frame"][a["retrans"]].tolist() == b["frame"][b["retrans"]].tolist()
            head_end = float(full["time"][cap - 1])
            beyond += sum(t > head_end for t, _ in b["drop_points"]) + sum(
                f > int(full["frame"][cap - 1]) for f in b["frame"][b["retrans"]].tolist()
            )
    assert beyond  # loss after the head was marked
    html = flows_report.render(path, {**res, "problems": [], "marks": marks})
    assert "class='note thinned'" in html and "The table above counts every packet" in html
