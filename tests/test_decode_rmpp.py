"""`ibwire decode` reassembles SA GetTable responses split over RMPP segments (IBA §13.6): the records
the test put into the table come back, decoded, on the frame that completes the transfer."""

import json

from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from test_mad_oracle import write_erf_pcap
from test_mad_rmpp import paths, table_response


def test_get_table_response_records_come_back(tmp_path):
    cap = tmp_path / "sa.pcap"
    records = paths(7)
    write_erf_pcap(cap, table_response(records))  # 3 segments
    rows = [json.loads(l) for l in run_ibwire("decode", cap, "--format", "jsonl", check=True).stdout.splitlines()]
    assert len(rows) == 3
    assert "rmpp.reassembled" not in rows[0]["layers"] and "rmpp.reassembled" not in rows[1]["layers"]
    done = rows[2]["layers"]["rmpp.reassembled"]
    assert done["complete"] and done["segments"] == 3 and done["record_size"] == 64
    got = [(r["pathrecord"]["dlid"], r["pathrecord"]["dgid"], r["pathrecord"]["p_key"]) for r in done["records"]]
    assert got == [(r.dlid, r.dgid, r.p_key) for r in records]
    text = run_ibwire("decode", cap, check=True).stdout.splitlines()
    assert "RMPP: 7 records from 3 segments" in text[2]
    filtered = run_ibwire("decode", cap, "-Y", "rmpp.reassembled.records == 7", check=True).stdout.splitlines()
    assert len(filtered) == 1


def test_lost_segment_is_reported(tmp_path):
    cap = tmp_path / "sa.pcap"
    segs = table_response(paths(9))
    write_erf_pcap(cap, [segs[0], segs[2]])
    text = run_ibwire("decode", cap, check=True).stdout.splitlines()
    assert "segments [2] missing" in text[-1]
