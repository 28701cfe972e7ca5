"""One name per thing in every output (issue 30): the MAD class `stats` counts is named as `decode -V` names it,
and the SM state `fabric` reports is spelled as `decode -V` spells it (opensm's MASTER, STANDBY …)."""

import json
import re
from pathlib import Path

from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

CAPS = Path(__file__).resolve().parents[1] / "captures"


def _tree_names(path, label):
    """The names `-V`'s ibwire section gives a numbered field, labelled as tshark labels it."""
    text = run_ibwire("decode", path, "-V", check=True, unwrapped=True).stdout
    return set(re.findall(rf"\[{re.escape(label)}: (\S+) \(\d+\)\]", text))


def test_stats_names_mad_classes_as_the_header_tree_does():
    path = CAPS / "loss-retransmit.pcap"  # CM set-up over QP1
    st = json.loads(run_ibwire("stats", path, "--format", "json", check=True).stdout)
    classes = {row["class"] for row in st["by_mad"]}
    assert classes and classes == _tree_names(path, "Management Class")


def test_fabric_spells_sm_states_as_the_header_tree_does():
    path = CAPS / "sm-sweep.pcap"
    fab = json.loads(run_ibwire("fabric", path, "--format", "json", check=True).stdout)
    assert fab["sm"]["master"]["state"] == "MASTER"
    assert {s["state"] for s in fab["sm"]["seen"]} <= _tree_names(path, "SMState")
