"""`ibwire health -T json` writes its document with report.jsontext.dumps_indented: the text must be
json.dumps(doc, indent=2, default=str)'s, character for character, for every value a document may hold."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ibwire.analyze.health import Settings, analyse
from ibwire.report.jsontext import dumps_indented

CAPTURES = Path(__file__).resolve().parents[1] / "captures"

VALUES = [
    {},
    [],
    (),
    {"a": [], "b": {}, "c": ()},
    [1, -2, 2.5, -0.0, 5e-324, 1e300, None, True, False, 'x\u2192\n"\\', (1, 2)],
    {"nested": [{"b": [[], {}, [[]]]}], "é": "µs"},
    {"nan": math.nan},  # the rest go to json.dumps whole
    [math.inf, -math.inf],
    {"numpy": np.int64(3), "float": np.float64(1.5)},
    {1: 2, None: 3},
    [object.__new__(Settings)],
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_text_is_json_dumps(value):
    assert dumps_indented(value) == json.dumps(value, indent=2, default=str)


@pytest.mark.parametrize("capture", ["pfc-storm.pcap", "pfc-both-ends.pcap", "congestion.pcap"])
def test_health_document_is_json_dumps(capture):
    doc = analyse(str(CAPTURES / capture), Settings(qos={"dscp": 26}))
    assert dumps_indented(doc) == json.dumps(doc, indent=2, default=str)
