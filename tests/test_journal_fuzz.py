"""Cleanup replays a capture journal as root, so its reader meets whatever lies in the run directory: a
hypothesis run over journals (valid ones mutated, arbitrary JSON, arbitrary bytes) through the real reader
(`journal_format.load`, from a directory descriptor as cleanup opens it).  It never raises, reports each
problem in words, and keeps for replay only undo commands of the forms ibwire writes."""

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibwire.capture import journal_format as J

NAME = "capture-4242-912345.json"
GOOD = {
    "pid": 4242,
    "start": "912345",
    "netns": "lab-pf",
    "target": "lab VF 2",
    "entries": [
        {"what": "qdisc", "undo": ["tc", "qdisc", "del", "dev", "pf0vf2", "clsact"]},
        {"what": "filter", "undo": ["tc", "filter", "del", "dev", "pf0vf2", "ingress", "pref", "49584"]},
        {"what": "rm", "undo": ["rm", "-rf", "/"]},
    ],
}
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=30)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _mutated(draw_key, draw_value, which):
    doc = json.loads(json.dumps(GOOD))
    target = doc if which == 0 else doc["entries"][which % 3]
    target[draw_key] = draw_value
    return json.dumps(doc).encode()


@st.composite
def journals(draw):
    kind = draw(st.integers(0, 2))
    if kind == 0:
        key = draw(st.sampled_from(["pid", "start", "netns", "target", "entries", "undo", "what", "extra"]))
        return _mutated(key, draw(values), draw(st.integers(0, 5)))
    if kind == 1:
        return json.dumps(draw(values)).encode()
    return draw(st.binary(max_size=200))


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(journals())
def test_any_journal_is_read_or_refused_in_words(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("run", numbered=True)
    (d / NAME).write_bytes(data)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        doc, problems = J.load(dfd, NAME)
    finally:
        os.close(dfd)
    assert all(isinstance(p, str) and p for p in problems)
    assert doc is not None or problems
    if doc is not None:
        assert (doc["pid"], doc["start"]) == (4242, "912345")
        for e in doc["entries"]:
            assert e.get("undo") is None or J.undo_known(e["undo"]), e
        assert J.sentence(NAME, problems).startswith(NAME)


def test_the_unmutated_journal_keeps_its_own_undos_and_drops_the_foreign_one(tmp_path):
    (tmp_path / NAME).write_text(json.dumps(GOOD))
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        doc, problems = J.load(dfd, NAME)
    finally:
        os.close(dfd)
    assert [e["what"] for e in doc["entries"]] == ["qdisc", "filter"]
    assert len(problems) == 1 and "not replayed" in problems[0]
