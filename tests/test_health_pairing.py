"""`ibwire health` pairs flows with the QPs answering them by PSN (analyze/healthflows `_pair_by_psn`), searching
all the flows of a pair of ends in one sorted array.  Its votes must be those of the plain rule the docstring
states: each packet coming back votes for the flow whose latest send of its PSN before it has the least gap
(the first such flow on a tie), within ANSWER_WITHIN_US.  The rule is written here flow by flow, and both
run on random captures' keys with many ties (few PSNs, few distinct microseconds)."""

from collections import Counter

import numpy as np
import pytest

from ibwire.analyze import healthflows
from ibwire.analyze.healthflows import ANSWER_WITHIN_US, _pair_by_psn

LOW = (1 << 39) - 1


def _votes_flow_by_flow(key, fs, back_q, sample):
    """The rule, one flow at a time: per packet coming back, the least gap among the flows that sent its PSN."""
    votes = Counter()
    sent = [np.sort(key[f["rows"]]) for f in fs]
    for q in sorted(back_q):
        kb = key[back_q[q][:sample]]
        gaps = np.full((len(fs), len(kb)), np.inf)
        for n, ks in enumerate(sent):
            k = np.searchsorted(ks, kb, side="right") - 1
            at = np.maximum(k, 0)
            gap = (kb & LOW) - (ks[at] & LOW)
            hit = (k >= 0) & (ks[at] >> 39 == kb >> 39) & (gap <= ANSWER_WITHIN_US)
            gaps[n, hit] = gap[hit]
        answered = np.isfinite(gaps).any(axis=0)
        counts = np.bincount(np.argmin(gaps, axis=0)[answered], minlength=len(fs))
        for n in np.flatnonzero(counts).tolist():
            votes[(q, n)] += int(counts[n])
    return votes


class _Recorded(Counter):
    """A Counter that keeps itself, to read the votes `_pair_by_psn` counted."""

    made = []

    def __init__(self, *a):
        super().__init__(*a)
        self.made.append(self)


@pytest.mark.parametrize("seed", range(4))
def test_pairing_votes_follow_the_rule(seed, monkeypatch):
    monkeypatch.setattr(healthflows, "Counter", _Recorded)
    rng = np.random.default_rng(seed)
    for _ in range(150):
        n, flows, qps = int(rng.integers(20, 400)), int(rng.integers(1, 5)), int(rng.integers(1, 5))
        psn = rng.integers(0, int(rng.choice([3, 10, 1 << 24])), n)
        us = np.sort(rng.integers(0, int(rng.choice([5, 50, 3 * ANSWER_WITHIN_US])), n))
        key = psn.astype(np.int64) << 39 | us
        owner = rng.integers(0, flows + qps, n)
        owner[:flows] = range(flows)  # every flow sent something
        fs = [{"rows": np.flatnonzero(owner == i), "partner": None, "paired_by": "none"} for i in range(flows)]
        back_q = {0x100 + j: np.flatnonzero(owner == flows + j) for j in range(qps)}
        sample = int(rng.choice([7, 5000]))
        _Recorded.made.clear()
        _pair_by_psn(key, fs, back_q, sample)
        want = _votes_flow_by_flow(key, fs, back_q, sample)
        assert list(_Recorded.made[0].items()) == list(want.items())
        for (q, f), _ in want.most_common()[:1]:  # the most voted pair is always taken
            assert fs[f]["partner"] == q and fs[f]["paired_by"] == "psn"
