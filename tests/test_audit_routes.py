"""A directed route starts at its requester (IBA Vol 1 §14.2.2): the same initial path sent by two
requesters reaches two different nodes, and a SubnSet from the permissive LID comes from its own requester's
port.  Requesters are told apart by the upper 32 TID bits, which each one's MAD layer owns."""

import json

from conftest import run_ibwire

from dissectors.mad import MAD
from dissectors.mad.smp import NodeInfo, PortInfo, SMInfo, SMPDirected
from dissectors.numbers import LINKTYPE_ERF
from ibwire.analyze.fabric import fabric_view
from ibwire.audit.mads import MadObserver
from ibwire.audit.state import FabricState
from ibwire.capture.ibsim_wire import ib_packet
from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter, erf_record

LIDS = {0xB: 5, 0xC: 9}  # switch (node and port 0 GUID) -> the LID its PortInfo answers


def _dr(method: int, attr: int, data, requester: int, n: int, path=(1,)) -> bytes:
    mad = MAD(mgmtclass=0x81, method=method, attributeid=attr, transactionid=requester << 32 | n)
    smp = SMPDirected(hopcount=len(path), d=method >> 7, initialpath=bytes([0, *path]).ljust(64, b"\0"))
    return bytes(mad / smp / data)[:256].ljust(256, b"\0")


def _get_resp(attr: int, data, requester: int, n: int) -> bytes:
    return _dr(0x81, attr, data, requester, n)


def _write(path, mads) -> None:
    with PcapWriter(str(path), LINKTYPE_ERF) as w:
        for i, mad in enumerate(mads):
            w.write(erf_record(1.0 + i, ib_packet(0xFFFF, 0xFFFF, 0, 0, mad, i)), ts=1.0 + i)


def _capture(path) -> None:
    mads = [
        _get_resp(0x11, NodeInfo(nodetype=2, numports=8, nodeguid=0xB, portguid=0xB, localportnum=7), 1, 1),
        _get_resp(0x11, NodeInfo(nodetype=2, numports=8, nodeguid=0xC, portguid=0xC, localportnum=7), 2, 1),
        _get_resp(0x15, PortInfo(lid=LIDS[0xB], localportnum=7), 1, 2),
        _get_resp(0x15, PortInfo(lid=LIDS[0xC], localportnum=7), 2, 2),
    ]
    _write(path, mads)


def test_each_requesters_route_is_its_own(tmp_path):
    path = tmp_path / "two-requesters.pcap"
    _capture(path)
    seen = MadObserver(FabricState())
    for n, frame in enumerate(iter_frames(str(path)), 1):
        flat = decode_frame(frame).flat
        seen.feed(n, flat, flat["mad.mgmtclass"])
    assert {guid: seen.wire.ports[guid].lid for guid in LIDS} == LIDS
    view = fabric_view(str(path))
    assert {p["guid"]: p["lid"] for p in view["ports"] if p["guid"] in LIDS} == LIDS


def test_a_subnset_from_the_permissive_lid_is_its_own_requesters(tmp_path):
    """The master SM (port 0xA1, requester 1) and another host (port 0xD1, requester 2) each read their own
    NodeInfo over the empty route, then each sends a directed-route SubnSet(PortInfo) from the permissive
    LID: only the other host's Set is a finding, and it names 0xD1, whichever read came last."""
    sm, rogue = dict(nodetype=1, numports=1, localportnum=1), dict(nodetype=1, numports=1, localportnum=1)
    for order in ((1, 2), (2, 1)):
        node = {1: NodeInfo(nodeguid=0xA, portguid=0xA1, **sm), 2: NodeInfo(nodeguid=0xD, portguid=0xD1, **rogue)}
        mads = [_dr(0x81, 0x20, SMInfo(guid=0xA1, priority=15, smstate=3), 1, 1, ())]
        mads += [_dr(0x81, 0x11, node[r], r, 2, ()) for r in order]
        mads += [_dr(0x02, 0x15, PortInfo(lid=7, localportnum=1), r, 3, (1, 2)) for r in (1, 2)]
        cap, policy = tmp_path / f"sets{order[0]}.pcap", tmp_path / "partitions.conf"
        _write(cap, mads)
        policy.write_text("Default=0x7fff, ipoib : ALL=full;\n")
        done = run_ibwire("audit", str(cap), "--policy", str(policy), "-T", "json")
        sets = [f for f in json.loads(done.stdout)["findings"] if f["rule"] == "smp-set-from-non-sm"]
        assert len(sets) == 1 and sets[0]["src_guid"] == "0x00000000000000d1", (order, sets)
        assert sets[0]["frames"] == [5], sets
