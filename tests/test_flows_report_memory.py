"""The flows report keeps a bounded number of packets per conversation drawn (memory stays flat however long
the capture): beyond the cap, every NAK, RNR NAK and bad-ICRC packet is still kept to be marked, and the
page says how much the graphs draw."""
from pathlib import Path

import numpy as np

from ibwire.analysis.flows import analyse
from ibwire.pictures import flows_report
from ibwire.pictures import series as S

CAP = Path(__file__).resolve().parents[1] / "captures" / "loss-retransmit.pcap"


def _nak_marks(pk):
    syn = np.where(S.HAS_AETH[pk["opcode"]], pk["aeth_syndrome"].astype(np.int64) >> 5, -1)
    return sorted(pk["frame"][(syn == 1) | (syn == 3) | pk["bad_icrc"]].tolist())


def test_beyond_the_cap_only_marked_packets_are_kept(monkeypatch):
    rows = analyse(str(CAP))["conversations"]
    keep = range(len(rows))
    whole = S.collect(str(CAP), rows, keep, 0.01)
    monkeypatch.setattr(S, "KEEP_PACKETS", 40)
    capped = S.collect(str(CAP), rows, keep, 0.01)
    assert whole.thinned == {} and capped.thinned
    for ci, (kept, seen, _) in capped.thinned.items():
        pk, full = capped.packets[ci], whole.packets[ci]
        assert kept == 40 and seen == len(full["frame"]) > 40
        assert pk["frame"][:40].tolist() == full["frame"][:40].tolist()          # the head kept whole
        assert _nak_marks(pk) == _nak_marks(full)                                  # every mark kept
        assert len(pk["frame"]) == 40 + len(set(_nak_marks(full)) - set(full["frame"][:40].tolist()))
    html = flows_report.render(str(CAP), {"conversations": rows, "problems": []})
    assert "class='note thinned'" in html and "The table above counts every packet" in html
