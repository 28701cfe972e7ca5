"""SMB Direct against tshark 4.4 (Debian 13's, the tshark44 fixture) on frames crafted byte by byte from
MS-SMBD and MS-SMB2 (tests/smbdirect_frames.py): every smb_direct.* / smb2.* value tshark shows is shown by
ibwire with the same value in the same frame, filters select tshark's frames, damaged messages never stop
an output, and the storage view's rows are what tshark's frames say.

Deliberate differences, each with its reason:
- a SEND split in First/Last: tshark 4.4 runs its heuristic on each packet alone, so it shows the data
  message's header on the First and nothing on the Last; ibwire shows the header on the First too and
  reassembles the SEND per QP, decoding the whole message (and its SMB2 request) on the Last.
- responses: tshark 4.4 keeps SMB2 conversations per direction on RoCE (its IB ports are the destination
  QP only), so it never links a response to its request; ibwire matches them by message id and the
  address pair and shows Wireshark's smb2.response_to and smb2.time on the response.
"""

import pytest
import smbdirect_frames
from one_process import ibwire_runs
from rpcrdma_frames import CAPTURES
from smbdirect_frames import write_capture
from storage_oracle import (
    RDMA_DATA,
    declared_counts,
    decodes_every_frame,
    ibwire_fields,
    ibwire_json,
    moved,
    protocols_follow,
    rdma_keys,
    rows_agree,
    storage_rows,
    tshark_filtered,
    tshark_frames,
)
from storage_oracle import leaves as tree_leaves

PROTOCOLS = ("smb_direct", "smb_direct.fragments", "smb2")


def leaves(text: str) -> dict:
    """(frame, key) -> [texts] of every smb_direct/smb2 leaf of -T json documents (repeated keys kept)."""
    return tree_leaves(text, PROTOCOLS)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("smbdirect") / "smb-direct.pcap"
    write_capture(path)
    return path


def test_smbdirect_fields_agree_with_tshark_44(tshark44, capture, tmp_path):
    """Every field tshark shows of every frame is in ibwire's -T json with the same values (all of them), in
    the crafted conversation and in a compound of two READs and its two responses."""
    chained = tmp_path / "compound.pcap"
    write_capture(chained, messages=smbdirect_frames.compound)
    theirs = leaves(tshark44(chained, "-T", "json"))
    ours = leaves(ibwire_json(chained))
    assert theirs and all(ours.get(k) == v for k, v in theirs.items())
    assert [len(v) for k, v in theirs.items() if k[1] == "smb2.msg_id"] == [2, 2]
    theirs = leaves(tshark44(capture, "-T", "json"))
    ours = leaves(ibwire_json(capture))
    wrong = [(k, theirs[k], ours.get(k)) for k in theirs if theirs[k] != ours.get(k)]
    assert not wrong, wrong[:10]
    values = sum(len(v) for v in theirs.values())
    smb2 = {f for f, k in theirs if k.startswith("smb2.")}
    print(f"tshark 4.4: {len(theirs)} smb_direct/smb2 fields ({values} values) in {len({f for f, _ in theirs})} frames")
    assert len(smb2) >= 8 and any(k == "smb2.buffer_descriptor.token" for _, k in theirs)
    # what ibwire adds: the SEND First/Last tshark leaves undecoded, the responses matched to requests
    assert {k for f, k in ours if (f, k) not in theirs and k.startswith("smb2.")} >= {"smb2.cmd", "smb2.response_to"}


REASSEMBLED = 18  # the SEND Last (after the RDMA-CM setup) only ibwire decodes (module doc)
FILTERS = (
    "smb_direct",
    "smb2",
    "smb_direct.negotiate_request",
    "smb_direct.negotiate_response",
    "smb_direct.data_message && !smb2",
    "smb_direct.flags.response_requested == 1",
    "smb_direct.remaining_length > 0",
    "smb_direct.fragment.count == 2",
    "smb2.cmd == 8",
    "smb2.cmd == 9 && smb2.flags.response == 0",
    "smb2.nt_status == 0xc0000022",
    "smb2.flags.async",
    "smb2.buffer_descriptor.token == 0xabc",
    "smb2.channel == 1",
    "smb2.msg_id == 9",
    "smb2.read_length > 100",
)


def test_filters_and_columns_select_tsharks_frames(tshark44, tmp_path):
    """-Y selects tshark's frames and -T fields -e prints tshark's values, here with the RDMA-CM setup for
    port 445 in front of the conversation."""
    path = tmp_path / "smb.pcap"
    write_capture(path, connect=True)
    keys = ["frame.number", "smb_direct.data_length", "smb2.cmd", "smb2.msg_id", "smb2.buffer_descriptor.token"]
    tsharks = tshark_filtered(tshark44, path, FILTERS, keys, ",")
    runs = [
        ["decode", "-Y", text, *(a for k in keys for a in ("-e", k)), "-T", "fields", "-E", "separator=,", path]
        for text in FILTERS
    ]
    for text, out in zip(FILTERS, ibwire_runs(runs)):
        ours = [r for r in out.splitlines() if r.split(",")[0] != str(REASSEMBLED)]
        assert ours == tsharks[text], text


@pytest.fixture(scope="module")
def undeclared(tmp_path_factory):
    path = tmp_path_factory.mktemp("smbdirect") / "undeclared.pcap"
    write_capture(path, messages=smbdirect_frames.undeclared)
    return path


def test_decode_as_is_tsharks(tshark44, undeclared, capture):
    """tshark 4.4 takes `-d infiniband,smb_direct` and still decodes only what its heuristic accepts: neither
    tool decodes a data offset of 32 or credits above 255, with or without it; on the crafted conversation
    -d changes nothing in either."""
    for args in ((), ("-d", "infiniband,smb_direct")):
        assert leaves(tshark44(undeclared, *args, "-T", "json")) == {}
        assert ibwire_fields(undeclared, *args, "-Y", "smb_direct", "-e", "frame.number") == []
    theirs = tshark44(capture, "-d", "infiniband,smb_direct", "-Y", "smb_direct", "-T", "fields", "-e", "frame.number")
    ours = ibwire_fields(capture, "-d", "infiniband,smb_direct", "-Y", "smb_direct", "-e", "frame.number")
    assert ours == sorted(theirs.splitlines() + [str(REASSEMBLED - 2)], key=int)  # its SEND Last (module doc)


def test_damaged_messages_never_stop_the_decode(tmp_path):
    """Every message cut at many lengths and with bytes flipped: every output decodes every frame, and a
    message cut inside its SMB2 header is flagged malformed."""
    path = tmp_path / "damaged.pcap"
    n = write_capture(path, messages=smbdirect_frames.damaged)
    assert "[Malformed Packet: SMB Direct]" in decodes_every_frame(path, n, "smb2.msg_id")


def test_storage_view_times_every_request_as_tsharks_frames_say(tshark44, capture):
    """stats --storage: one row per SMB2 request (tshark's frames with smb2.flags.response 0), its final
    response (the next response of its message id that is not STATUS_PENDING), latency, status, and the
    bytes of tshark's RDMA WRITEs and READ responses (matched to their request by PSN) whose R_Key is one of
    the request's buffer descriptor tokens, plus inline READ data and WRITE data."""
    keys = "frame.number frame.time_epoch infiniband.bth.opcode infiniband.bth.psn infiniband.bth.destqp"
    keys += " infiniband.reth.r_key data.len smb2.flags.response smb2.msg_id smb2.nt_status"
    keys += " smb2.buffer_descriptor.token smb2.write_length"
    frames, reqs, by_token = tshark_frames(tshark44, capture, keys), {}, {}
    for n, f in frames.items():
        if f["smb2.flags.response"] == "False":  # tshark 4.4 writes booleans so in -T fields
            reqs[f["smb2.msg_id"]] = {"submission": n, "time": float(f["frame.time_epoch"]), "completion": None}
            reqs[f["smb2.msg_id"]]["bytes"] = int(f["smb2.write_length"] or 0)
            by_token.update(dict.fromkeys(f["smb2.buffer_descriptor.token"].split(";"), reqs[f["smb2.msg_id"]]))
        elif f["smb2.flags.response"] == "True" and f["smb2.nt_status"] != "0x00000103" and f["smb2.msg_id"] in reqs:
            req = reqs[f["smb2.msg_id"]]
            req["completion"], req["status"] = n, f["smb2.nt_status"]
            req["latency_us"] = round((float(f["frame.time_epoch"]) - req["time"]) * 1e6, 1)
            req["bytes"] += int(f["data.len"] or 0) if f["smb2.nt_status"] == "0x00000000" else 0
    for n, key in rdma_keys(frames).items():
        if key and f"0x{int(key, 16):08x}" in by_token:
            by_token[f"0x{int(key, 16):08x}"]["bytes"] += int(frames[n]["data.len"])
    ours = {str(r["message_id"]): r for r in storage_rows(capture, "smb_requests")}
    ibwire_only = {"10"}  # the request in the SEND First/Last only ibwire decodes (module doc)
    assert sorted(ours) == sorted(set(reqs) | ibwire_only)
    rows_agree(ours, reqs, 1)


def test_smb_sample_ground_truth_as_tshark_and_ibwire_count_it(tshark44):
    """captures/smb-direct.pcap (ibwire synth): tshark 4.4 finds the declared requests, responses and RDMA
    bytes (the data of RDMA WRITEs and READ responses), and the storage view has every request answered
    with those bytes."""
    pcap = CAPTURES / "smb-direct.pcap"
    want = declared_counts(pcap)
    requests = tshark44(pcap, "-Y", "smb2.flags.response == 0").splitlines()
    responses = tshark44(pcap, "-Y", "smb2.flags.response == 1").splitlines()
    moved_by_data_len = sum(map(int, tshark44(pcap, "-Y", RDMA_DATA, "-T", "fields", "-e", "data.len").split()))
    assert (len(requests), len(responses), moved_by_data_len, moved(tshark44, pcap)) == (
        want["smb_requests"],
        want["smb_responses"],
        want["rdma_bytes"],
        want["rdma_bytes"],
    )
    rows = storage_rows(pcap, "smb_requests")
    assert len(rows) == want["smb_requests"] and all(r["status"] == "STATUS_SUCCESS" for r in rows)
    assert sum(r["bytes"] for r in rows) == want["rdma_bytes"]


def test_frame_protocols_are_tsharks(tshark44, capture):
    """frame.protocols names the storage protocols a frame carries, as its document shows them and as
    tshark 4.4 names them (`…:smb_direct:smb2`; before, every payload was `data`): frame by frame it lists the
    document's layers, and on every frame whose layers are tshark's it is tshark's (the deliberate differences
    of the module's docstring aside)."""
    theirs = tshark44(capture, "-T", "json")
    assert protocols_follow(theirs, ibwire_json(capture)) >= 10
