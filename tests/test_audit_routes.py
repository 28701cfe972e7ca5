"""A directed route starts at its requester (IBA Vol 1 §14.2.2): the same initial path sent by two
requesters reaches two different nodes.  Two requesters (told apart by the upper 32 TID bits, which each
one's MAD layer owns) read NodeInfo and then PortInfo over the path [1], one reaching switch 0xB, the other
switch 0xC, interleaved; the audit's view of the wire and the fabric view must give each switch its own
LID, as the scenario declares."""

from dissectors.mad import MAD
from dissectors.mad.smp import NodeInfo, PortInfo, SMPDirected
from dissectors.numbers import LINKTYPE_ERF
from ibwire.analyze.fabric import fabric_view
from ibwire.audit.mads import MadObserver
from ibwire.audit.state import FabricState
from ibwire.capture.ibsim_wire import ib_packet
from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter, erf_record

LIDS = {0xB: 5, 0xC: 9}  # switch (node and port 0 GUID) -> the LID its PortInfo answers


def _get_resp(attr: int, data, requester: int, n: int) -> bytes:
    mad = MAD(mgmtclass=0x81, method=0x81, attributeid=attr, transactionid=requester << 32 | n)
    smp = SMPDirected(hopcount=1, d=1, initialpath=bytes([0, 1]).ljust(64, b"\0"))
    return bytes(mad / smp / data)[:256].ljust(256, b"\0")


def _capture(path) -> None:
    mads = [
        _get_resp(0x11, NodeInfo(nodetype=2, numports=8, nodeguid=0xB, portguid=0xB, localportnum=7), 1, 1),
        _get_resp(0x11, NodeInfo(nodetype=2, numports=8, nodeguid=0xC, portguid=0xC, localportnum=7), 2, 1),
        _get_resp(0x15, PortInfo(lid=LIDS[0xB], localportnum=7), 1, 2),
        _get_resp(0x15, PortInfo(lid=LIDS[0xC], localportnum=7), 2, 2),
    ]
    with PcapWriter(str(path), LINKTYPE_ERF) as w:
        for i, mad in enumerate(mads):
            w.write(erf_record(1.0 + i, ib_packet(0xFFFF, 0xFFFF, 0, 0, mad, i)), ts=1.0 + i)


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
