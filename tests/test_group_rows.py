"""The compiled group-by behind stats and flows: rows share a group exactly when their key fields are
equal, groups are numbered by first appearance, and a row subset groups only those rows."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ibwire.analyze.hashing import group_rows
from ibwire.decode.records import RECORD

FIELDS = ("dst", "dlid", "eth_dst", "destqp")


def _records(draw_values):
    rec = np.zeros(len(draw_values), RECORD)
    for i, (addr, lid, mac, qp, noise) in enumerate(draw_values):
        rec[i]["dst"] = bytes([addr]) * 16
        rec[i]["dlid"], rec[i]["destqp"], rec[i]["psn"] = lid, qp, noise  # psn: not a key field
        rec[i]["eth_dst"] = bytes([mac]) * 6
    return rec


row = st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 1), st.integers(0, 3), st.integers(0, 99))


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=300), st.data())
def test_groups_are_exactly_the_equal_keys(values, data):
    rec = _records(values)
    rows = None
    if values and data.draw(st.booleans()):
        rows = np.array(sorted(data.draw(st.sets(st.integers(0, len(values) - 1)))), np.int64)
    pick = np.arange(len(rec)) if rows is None else rows
    keys = [tuple(bytes(rec[i][f]) if rec.dtype[f].kind == "V" else int(rec[i][f]) for f in FIELDS) for i in pick]
    hashes, first, inverse = group_rows(rec, FIELDS, rows)
    assert len(inverse) == len(keys)
    expected = {}
    for pos, k in enumerate(keys):
        expected.setdefault(k, len(expected))
        assert inverse[pos] == expected[k]  # equal keys share a group, numbered by appearance
    assert len(first) == len(hashes) == len(expected)
    assert [keys[i] for i in first] == list(expected)  # first row of each group carries its key
