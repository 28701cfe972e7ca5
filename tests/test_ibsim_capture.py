"""capture_ibsim against a real ibsim, opensm and infiniband-diags (Debian ibsim-utils, opensm,
infiniband-diags); tshark 4.0 is the oracle for every field, dissectors.crc for ICRC/VCRC."""

import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest
import tshark_oracle
from fabric import scenario
from test_mad_oracle import TSHARK_EXCEPTIONS

from dissectors.crc import icrc_ib, vcrc
from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_INFINIBAND
from ibwire.analyze.fabric.extract import iter_mads, native_ib
from ibwire.capture.ending import complete_prefix
from ibwire.decode import decode_frame
from ibwire.files import iter_frames

for _tool in ("ibsim", "opensm", "smpquery", "saquery", "perfquery", "ibnetdiscover"):
    assert shutil.which(_tool), (
        f"{_tool} is required for the ibsim tests: apt-get install ibsim-utils opensm infiniband-diags"
    )


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return scenario.run(str(tmp_path_factory.mktemp("ibsim")))


def _tshark(path, *args):
    r = subprocess.run(["tshark", "-r", path, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_ibsim_capture_opens_in_tshark_without_malformed_packets(sim):
    assert sim["stats"]["packets"] > 100 and sim["stats"]["dropped"] == 0
    info = _tshark(sim["path"], "-T", "fields", "-e", "_ws.col.Info").splitlines()
    assert len(info) == sim["stats"]["packets"]
    assert _tshark(sim["path"], "-Y", "_ws.malformed || _ws.expert.severity >= error").strip() == ""
    text = "\n".join(info)
    for want in (
        "SubnGet(NodeInfo)",
        "SubnSet(P_KeyTable)",
        "SubnGetResp(PortInfo)",
        "SubnAdmGetTable(NodeRecord)",
        "SubnGet(SMInfo)",
        "PortCounters",
    ):
        assert want in text, want


def test_ibsim_capture_crcs_are_correct(sim):
    n = 0
    for fr in iter_frames(sim["path"]):
        assert fr.linktype == LINKTYPE_ERF
        ib = native_ib(fr.linktype, fr.data)
        assert len(ib) == 8 + 12 + 8 + 256 + 4 + 2
        assert struct.unpack("<I", ib[-6:-2])[0] == icrc_ib(ib[:-6])
        assert struct.unpack("<H", ib[-2:])[0] == vcrc(ib[:-2])
        n += 1
    assert n == sim["stats"]["packets"]


def test_ibsim_capture_every_field_agrees_with_tshark(sim):
    decoded = [decode_frame(f) for f in iter_frames(sim["path"])]
    mismatches, compared, _ = tshark_oracle.compare(sim["path"], decoded, ignore=set(TSHARK_EXCEPTIONS))
    assert compared > 5000 and mismatches == []
    names = {d.flat["nodedescription.nodestring"] for d in decoded if d.flat.get("nodedescription.nodestring")}
    assert {"Hca1", "Hca2", "Hca3", "Switch1"} <= names


def test_ibsim_capture_addressing_follows_the_spec(sim):
    requests, responses, trapped = {}, {}, False
    for m in iter_mads(sim["path"]):
        trapped = trapped or m.mad[3] == 0x05
        if m.mad[1] == 0x81:
            assert (m.dlid, m.slid, m.dqp, m.sqp) == (0xFFFF, 0xFFFF, 0, 0)
        else:
            assert m.slid not in (0, 0xFFFF) and m.dlid not in (0, 0xFFFF)
            assert m.dqp == (0 if m.mad[1] == 0x01 else 1)
        tid = m.mad[8:16]
        if m.mad[3] & 0x80:
            responses.setdefault(tid, m)
        elif not trapped:  # after trap 144 opensm polls Hca2's SMInfo: the tool that set IsSM is gone
            requests.setdefault(tid, m)
    unanswered = [t for t, m in requests.items() if t not in responses and m.mad[3] not in (0x05, 0x07)]
    assert unanswered == [] and len(responses) > 50
    for fr in iter_frames(sim["path"]):
        ib = native_ib(fr.linktype, fr.data)
        vl, dqp, qkey = ib[0] >> 4, int.from_bytes(ib[13:16], "big"), int.from_bytes(ib[20:24], "big")
        assert ib[8] == 0x64 and vl == (15 if dqp == 0 else 0) and qkey == (0 if dqp == 0 else 0x80010000)


def _wait_packets(path, n: int, timeout: float = 30.0):
    """Until the capture (another thread or process, maybe behind on a loaded machine) has written n packets."""
    end = time.monotonic() + timeout
    while complete_prefix(path)[0] < n:
        assert time.monotonic() < end, f"{path} has fewer than {n} packets after {timeout:.0f} s"
        time.sleep(0.05)


def test_ibsim_capture_link_type_247(tmp_path):
    with scenario.SimFabric(str(scenario.TOPOLOGY), workdir=str(tmp_path)) as fab:
        import threading

        stop, ready, stats = threading.Event(), threading.Event(), {}
        out = str(tmp_path / "ib.pcap")
        t = threading.Thread(
            target=lambda: stats.update(scenario.capture_ibsim(out, link="ib", stop=stop, port=fab.port, ready=ready))
        )
        t.start()
        assert ready.wait(30), "capture_ibsim did not start"
        try:
            fab.run(["smpquery", "-D", "nodeinfo", "0"])
            _wait_packets(out, 2)
        finally:
            stop.set()
            t.join(10)
    frames = list(iter_frames(out))
    assert stats["packets"] == len(frames) == 2
    assert all(f.linktype == LINKTYPE_INFINIBAND for f in frames)
    assert [decode_frame(f).flat["mad.method"] for f in frames] == [0x01, 0x81]
    assert all(decode_frame(f).flat["icrc.status"] == "good" for f in frames)


def test_ibsim_capture_file_stays_valid_when_killed(tmp_path):
    with scenario.SimFabric(str(scenario.TOPOLOGY), workdir=str(tmp_path)) as fab:
        out = str(tmp_path / "killed.pcap")
        code = (
            "from ibwire.capture.ibsim import capture_ibsim\n"
            "class Ready:\n    set = staticmethod(lambda: print('ready', flush=True))\n"
            f"capture_ibsim({out!r}, port={fab.port}, ready=Ready)"
        )
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline() == "ready\n"  # listening
            fab.run(["smpquery", "-D", "nodeinfo", "0"])
            fab.run(["smpquery", "-D", "nodedesc", "0"])
            _wait_packets(out, 4)  # both replies written (the file is flushed per packet)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
    lines = _tshark(out, "-T", "fields", "-e", "_ws.col.Info").splitlines()
    assert lines[:2] == ["UD Send Only QP=0x000000 SubnGet(NodeInfo)", "UD Send Only QP=0x000000 SubnGetResp(NodeInfo)"]
    assert lines[-1] == "UD Send Only QP=0x000000 SubnGetResp(NodeDescription)"
