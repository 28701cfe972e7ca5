"""Pause episodes per direction when both ends of a link are in one capture: `ibwire health` on
captures/pfc-both-ends.pcap (host gpu1 and its switch port leaf1 each pause the other, both send LLDP) reports
each direction, sender → the end it pauses, with the frames, XOFFs, XONs, episodes and longest pause its
scenario declares ([[expect.health.pauses]]), the frames per sender equal to tshark's count.  The same link
captured on two interfaces of one pcapng (the same MACs on both, as a switch that sends every port's pauses
from one system MAC) gives each direction once per interface with the declared counts, not their sum, and a
storm finding's filter (frame.interface_id) selects exactly its frames in ibwire and in tshark."""

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

from dissectors.numbers import LINKTYPE_ETHERNET
from ibwire.files import iter_frames
from ibwire.files.writers import PcapngWriter

CAPS = Path(__file__).resolve().parents[1] / "captures"
PCAP = CAPS / "pfc-both-ends.pcap"
EXPECT = tomllib.loads((CAPS / "pfc-both-ends.toml").read_text())["expect"]["health"]
SHIFT = 50e-6  # interface 1 carries the same frames 50 us later: the two links' frames interleave


def _health(path, *args) -> dict:
    r = run_ibwire("health", path, "-T", "json", *args, unwrapped=True)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def _tshark_count(path, flt: str) -> int:
    out = subprocess.run(["tshark", "-r", str(path), "-Y", flt], capture_output=True, text=True, check=True).stdout
    return len(out.splitlines())


def _declared(e: dict) -> dict:
    return {k: e[k] for k in ("direction", "priority", "frames", "xoff", "xon")}


def _ours(e: dict) -> dict:
    return {
        "direction": e["direction"],
        "priority": e["priority"],
        "frames": e["frames"],
        "xoff": e["xoff"],
        "xon": e["xon"],
    }


def _check(entries, declared):
    assert len(entries) == len(declared)
    for want in declared:
        got = [e for e in entries if _ours(e) == _declared(want)]
        assert len(got) == 1, (want, entries)
        assert len(got[0]["episodes"]) == want["episodes"]
        assert got[0]["longest_s"] == pytest.approx(want["longest_us"] * 1e-6, abs=1e-6)


def test_each_direction_is_what_the_scenario_declares(tshark):
    r = _health(PCAP)
    assert [f["kind"] for f in r["findings"]] == EXPECT["findings"]
    assert sum(e["frames"] for e in r["pause"]) == _tshark_count(PCAP, "macc") == EXPECT["pause_frames"]
    assert len(r["pause"]) == len(EXPECT["pauses"])
    _check(r["pause"], EXPECT["pauses"])
    for e in r["pause"]:  # the sender and the end it pauses: each end is the other's receiver
        assert e["interface"] is None and e["direction"] == f"{e['port']} → {e['receiver']}"
    senders = {e["port"] for e in r["pause"]}
    assert {e["receiver"] for e in r["pause"]} == senders and len(senders) == 2
    for port in senders:
        assert sum(e["frames"] for e in r["pause"] if e["port"] == port) == _tshark_count(
            PCAP, f"eth.src == {port} && macc"
        )


@pytest.fixture(scope="module")
def two_links(tmp_path_factory):
    path = tmp_path_factory.mktemp("links") / "two-links.pcapng"
    frames = list(iter_frames(str(PCAP)))
    both = sorted([(f.time, 0, f.data) for f in frames] + [(f.time + SHIFT, 1, f.data) for f in frames])
    with open(path, "wb") as out:
        w = PcapngWriter(out)
        for name in ("tap-a", "tap-b"):
            w.add_interface(LINKTYPE_ETHERNET, name)
        for t, iface, data in both:
            w.write(data, t, iface=iface, flush=False)
    return path


def test_two_interfaces_keep_their_directions_apart(two_links, tshark):
    r = _health(two_links)
    assert len(r["pause"]) == 2 * len(EXPECT["pauses"])
    for iface in (0, 1):
        suffix = f" on interface {iface}"
        on = [e for e in r["pause"] if e["interface"] == iface]
        assert all(e["direction"].endswith(suffix) for e in on)
        _check([{**e, "direction": e["direction"].removesuffix(suffix)} for e in on], EXPECT["pauses"])
    ours = run_ibwire("decode", two_links, "-T", "fields", "-e", "frame.interface_id", "-Y", "macc", check=True)
    theirs = subprocess.run(
        [tshark, "-r", str(two_links), "-T", "fields", "-e", "frame.interface_id", "-Y", "macc"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ours.stdout == theirs and set(theirs.split()) == {"0", "1"}


def test_storm_filter_selects_its_frames_on_its_interface(two_links, tshark):
    """With a 100 ms threshold leaf1's 120 ms pause of gpu1 is a storm on each interface; each finding's
    filter selects exactly its frames, in ibwire and in tshark."""
    r = _health(two_links, "--storm-ms", "100")
    storms = [f for f in r["findings"] if f["kind"] == "pause_storm"]
    assert sorted(f["interface"] for f in storms) == [0, 1]
    for f in storms:
        assert f"frame.interface_id == {f['interface']}" in f["filter"]
        assert f["frame_count"] == 401 == _tshark_count(two_links, f["filter"])
        ours = run_ibwire("decode", two_links, "-Y", f["filter"], "-T", "fields", "-e", "frame.number", check=True)
        assert [int(x) for x in ours.stdout.split()][:50] == f["frames"]
        assert len(ours.stdout.split()) == f["frame_count"]
