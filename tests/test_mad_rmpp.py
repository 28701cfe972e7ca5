"""RMPP reassembly of an SA GetTable response: segments out of order and duplicated give back exactly
the records the test put in (ground truth declared here), split by AttributeOffset."""

import random
import struct

from dissectors.mad import MAD, reassemble
from dissectors.mad.sa import RMPP, SA, PathRecord

SEG_DATA = 200


def table_response(records, tid=0x77, offset=8):
    """GetTableResp segments as the Linux kernel sends them (mad_rmpp.c): 200 data bytes each."""
    data = b"".join(bytes(r).ljust(offset * 8, b"\0") for r in records)
    n = max(1, -(-len(data) // SEG_DATA))
    pad = n * SEG_DATA - len(data)
    segs = []
    for i in range(n):
        flags = 0x1 | (0x2 if i == 0 else 0) | (0x4 if i == n - 1 else 0)
        paylen = n * 220 - pad if i == 0 else (220 - pad if i == n - 1 else 0)
        head = MAD(mgmtclass=0x03, classversion=2, method=0x92, attributeid=0x35, transactionid=tid)
        rmpp = RMPP(rmpptype=1, rresptime=0x1F, rmppflags=flags, segmentnumber=i + 1, payloadlength=paylen)
        seg = bytes(head / rmpp / SA(attributeoffset=offset)) + data[i * SEG_DATA : (i + 1) * SEG_DATA]
        segs.append(seg.ljust(256, b"\0"))
    return segs


def paths(n):
    return [
        PathRecord(dgid=f"fe80::{i + 1}", sgid="fe80::99", dlid=i + 1, slid=99, p_key=0x8001, mtu=4, rate=6, sl=i % 16)
        for i in range(n)
    ]


def test_shuffled_duplicated_segments_give_every_record():
    recs = paths(7)  # 448 bytes: 3 segments, the last one 48 bytes
    segs = table_response(recs)
    assert len(segs) == 3
    mixed = segs + [segs[1], segs[0]]
    random.Random(3).shuffle(mixed)
    t = reassemble(mixed)
    assert t.complete and t.missing == [] and t.record_size == 64 and len(t.payload) == 448
    assert [r.dlid for r in t.records] == list(range(1, 8))
    assert [bytes(r) for r in t.records] == [bytes(r) for r in recs]
    assert t.records[6].dgid == "fe80::7" and t.records[3].sl == 3


def test_missing_segment_is_reported_and_other_tids_ignored():
    segs = table_response(paths(9))
    other = table_response(paths(2), tid=0x55)
    t = reassemble([segs[0], segs[2]] + other, tid=0x77)
    assert not t.complete and t.missing == [2]
    assert t.records[0].dlid == 1


def test_single_mad_without_rmpp_splits_records():
    mad = bytes(
        MAD(mgmtclass=0x03, method=0x81, attributeid=0x35) / RMPP(rmpptype=0) / SA(attributeoffset=8) / paths(1)[0]
    ).ljust(256, b"\0")
    t = reassemble([mad])
    assert t.records[0].dlid == 1 and len(t.records) == 3  # 200 bytes hold 3 whole 64-byte slots


def test_first_segment_decodes_as_a_single_mad():
    seg = MAD(table_response(paths(7))[0])
    assert seg.mysummary() == "SubnAdmGetTableResp(PathRecord)"
    assert seg[RMPP].rresptime == 0x1F and seg[RMPP].rmppflags == 3 and seg[RMPP].payloadlength == 508
    assert seg[PathRecord].dlid == 1
    assert struct.unpack(">H", bytes(seg)[44:46])[0] == 8
