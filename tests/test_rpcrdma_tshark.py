"""NFS over RDMA against tshark 4.4 (Debian 13's, the tshark44 fixture) on frames crafted byte by byte from
RFC 8166, RFC 5531, RFC 1813 and RFC 7530 (tests/rpcrdma_frames.py): every rpcordma.* / rpc.* / nfs.*
value both decode is the same in the same frame, and ibwire decodes what tshark decodes of them.

Deliberate differences, each with its reason:
- replies: tshark 4.4 keeps RPC conversations per direction on RoCE (its IB ports are the destination QP
  only), so it never finds a reply's call and shows program, version and procedure 0; ibwire matches the
  reply to its call by XID and the address pair, shows the call's values (as Wireshark does for a matched
  reply) and decodes the NFS results.  Those three fields of replies are not compared.
- a call with a read list: both show the RPC message on the RDMA READ response that completes the read
  chunk (the SEND carries the RPC-RDMA header and data); tshark 4.4 on RoCE never finds that response's
  request (the conversation again), so only ibwire shows it there.  Likewise a reply sent in the reply
  chunk: ibwire decodes it in the RDMA_NOMSG from what the RDMA WRITEs put in the chunk.
"""

import pytest
import rpcrdma_frames
from one_process import (
    ibwire_runs,
    run_ibwire,  # forked from a process that imported ibwire: the output is the point
)
from rpcrdma_frames import PROTOCOLS, REPLY_CALL, write_capture
from storage_oracle import (
    RDMA_DATA,
    agreement,
    damaged,
    declared_counts,
    decodes_every_frame,
    ibwire_fields,
    ibwire_json,
    leaves,
    moved,
    protocols_follow,
    rdma_keys,
    rows_agree,
    storage_rows,
    tshark_filtered,
    tshark_frames,
)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("rpcrdma") / "nfs-rdma.pcap"
    write_capture(path)
    return path


def test_rpcrdma_fields_agree_with_tshark_44(tshark44, capture):
    theirs = leaves(tshark44(capture, "-T", "json"), PROTOCOLS)
    ours = leaves(ibwire_json(capture), PROTOCOLS)
    replies = {f for (f, k), v in theirs.items() if k == "rpc.msgtyp" and v == ["1"]}
    compared, wrong, missing, values = agreement(theirs, ours, lambda k: k[0] in replies and k[1] in REPLY_CALL)
    assert not wrong, wrong[:10]
    print(
        f"tshark 4.4: {len(theirs)} rpcordma/rpc/nfs fields in {len({f for f, _ in theirs})} frames; ibwire has "
        f"the same values of {len(compared)} ({values} values); not shown: {missing}"
    )
    assert len(missing) / len(theirs) <= 0.01, missing  # a length tshark shows as 0 in a cut credential


@pytest.fixture(scope="module")
def undeclared(tmp_path_factory):
    path = tmp_path_factory.mktemp("rpcrdma") / "undeclared.pcap"
    write_capture(path, messages=rpcrdma_frames.undeclared)
    return path


def test_decode_as_takes_what_the_heuristic_turns_down(tshark44, undeclared):
    """Without -d neither tool decodes an RDMA_MSG whose RPC XID differs from its own; with tshark's
    `-d infiniband,rpcordma` both do, with the same values.  A version 2 word and a version 3 word: tshark
    4.4 leaves both undecoded; ibwire decodes the first as version 2 (tests/test_rpcrdma_v2_tshark.py) and
    flags the second, decoding only the four words every version shares."""
    assert leaves(tshark44(undeclared, "-T", "json"), PROTOCOLS) == {}
    assert ibwire_fields(undeclared, "-Y", "rpcordma", "-e", "frame.number") == []
    theirs = leaves(tshark44(undeclared, "-d", "infiniband,rpcordma", "-T", "json"), PROTOCOLS)
    ours = leaves(ibwire_json(undeclared, "-d", "infiniband,rpcordma"), PROTOCOLS)
    assert {f for f, _ in theirs} == {1} and {f for f, _ in ours} == {1, 2, 3}
    assert theirs == {k: v for k, v in ours.items() if k[0] == 1}
    assert (ours[(2, "rpcordma.version")], ours[(3, "rpcordma.version")]) == (["2"], ["3"])
    assert {k for f, k in ours if f == 3} == {f"rpcordma.{k}" for k in ("xid", "version", "flow_control", "msg_type")}
    text = run_ibwire("decode", "-d", "infiniband,rpcordma", undeclared, check=True).stdout.splitlines()
    assert text[2].endswith("[RPC-RDMA version 3 unknown: only the XID, version, credits and type words decoded]")


CALLS = " && rpc.msgtyp == 0"  # ibwire decodes NFS in replies too, tshark 4.4 on RoCE cannot (module doc)
FILTERS = (
    "rpcordma",
    "rpc",
    "nfs" + CALLS,
    "rpcordma.msg_type == 1",
    "rpcordma.rdma_handle == 0xabc",
    "rpcordma.writes_count > 0",
    "rpc.msgtyp == 1 && rpc.replystat == 1",
    "rpc.program == 100003" + CALLS,
    "nfs.procedure_v3 == 6" + CALLS,
    "nfs.fh.hash == 0x5e268e58",
    'nfs.name contains "long"',
    "rpc.auth.gid == 27",
    "nfs.opcode == 22",
    "rpcordma.errcode",
    "rpcordma.reassembled.length > 100",
)


def test_filters_and_columns_select_tsharks_frames(tshark44, tmp_path):
    """-Y selects tshark's frames and -T fields -e prints tshark's values, here with the RDMA-CM setup for
    port 20049 in front of the conversation."""
    path = tmp_path / "nfs.pcap"
    write_capture(path, connect=True)
    keys = ["frame.number", "rpcordma.xid", "rpcordma.rdma_length", "rpc.xid", "rpc.msgtyp", "nfs.fhandle"]
    # RPC messages carried in chunks (a read chunk's last READ response, an RDMA_NOMSG's reply chunk): ibwire
    # shows them, tshark 4.4 on RoCE cannot (module doc)
    chunks = set(
        ibwire_fields(path, "-Y", "(rpcordma.chunk_call || rpcordma.msg_type == 1) && rpc", "-e", "frame.number")
    )
    tsharks = tshark_filtered(tshark44, path, FILTERS, keys, ",")
    runs = [
        ["decode", "-Y", text, *(a for k in keys for a in ("-e", k)), "-T", "fields", "-E", "separator=,", path]
        for text in FILTERS
    ]
    for text, out in zip(FILTERS, ibwire_runs(runs)):
        theirs = tsharks[text]
        ours = [r if r.split(",")[0] not in chunks else ",".join(r.split(",")[:3] + [""] * 3) for r in out.splitlines()]
        assert [r for r in ours if r.split(",")[0] not in chunks or r in theirs] == theirs, text


def test_damaged_messages_never_stop_the_decode(tmp_path):
    """Every message cut at every length and with its words flipped: every output decodes every frame."""
    cut = damaged(rpcrdma_frames.messages(), rpcrdma_frames.SEND_ONLY, 12, 7, (9, 5))
    path = tmp_path / "damaged.pcap"
    n = write_capture(path, messages=lambda: cut)
    # a call cut inside its credential is flagged, as tshark does
    assert "[Malformed Packet: RPC]" in decodes_every_frame(path, n, "rpcordma.xid", "-d", "rpcordma")


def test_storage_view_times_every_call_as_tsharks_frames_say(tshark44, capture):
    """stats --storage: one row per call, its reply frame and latency from tshark's own frames (a call: an
    RPC call, or a message with a read list; its reply: the RPC reply or the RDMA_NOMSG of the same XID),
    and the bytes its chunks moved: the data of tshark's RDMA WRITEs and READ responses (matched to their
    request by PSN) whose R_Key is one of the call's RDMA handles."""
    keys = "frame.number frame.time_epoch infiniband.bth.opcode infiniband.bth.psn infiniband.bth.destqp"
    keys += " infiniband.reth.r_key data.len rpcordma.xid rpcordma.msg_type rpcordma.rdma_handle"
    keys += " rpcordma.reads_count rpc.msgtyp"
    frames, calls, by_key = tshark_frames(tshark44, capture, keys), {}, {}
    for n, f in frames.items():
        if f["rpc.msgtyp"] == "0" or f["rpcordma.reads_count"] not in ("", "0"):
            calls[f["rpcordma.xid"]] = {"submission": n, "time": float(f["frame.time_epoch"]), "bytes": 0}
            calls[f["rpcordma.xid"]].update(completion=None, latency_us=None)
            by_key.update(dict.fromkeys(f["rpcordma.rdma_handle"].split(";"), calls[f["rpcordma.xid"]]))
        elif (f["rpc.msgtyp"] == "1" or f["rpcordma.msg_type"] == "1") and f["rpcordma.xid"] in calls:
            call = calls[f["rpcordma.xid"]]
            call["completion"] = n
            call["latency_us"] = round((float(f["frame.time_epoch"]) - call["time"]) * 1e6, 1)
    for n, key in rdma_keys(frames).items():
        if key in by_key and frames[n]["data.len"]:
            by_key[key]["bytes"] += int(frames[n]["data.len"])
    ours = {r["xid"]: r for r in storage_rows(capture, "rpc_calls")}
    assert sorted(ours) == sorted(calls)
    rows_agree(ours, calls, 1)


def test_nfs_sample_ground_truth_as_tshark_and_ibwire_count_it(tshark44):
    """captures/nfs-rdma.pcap (ibwire synth): tshark 4.4 finds the declared calls, replies and chunk bytes
    (calls: RPC calls and read-list messages; bytes: the data of RDMA WRITEs and READ responses), and the
    storage view has every call replied with those bytes."""
    pcap = rpcrdma_frames.CAPTURES / "nfs-rdma.pcap"
    want = declared_counts(pcap)
    calls = tshark44(pcap, "-Y", "rpc.msgtyp == 0 || rpcordma.reads_count > 0").splitlines()
    replies = tshark44(pcap, "-Y", "rpc.msgtyp == 1").splitlines()
    moved_by_data_len = sum(map(int, tshark44(pcap, "-Y", RDMA_DATA, "-T", "fields", "-e", "data.len").split()))
    assert (len(calls), len(replies), moved_by_data_len, moved(tshark44, pcap)) == (
        want["rpc_calls"],
        want["rpc_replies"],
        want["chunk_bytes"],
        want["chunk_bytes"],
    )
    rows = storage_rows(pcap, "rpc_calls")
    assert len(rows) == want["rpc_calls"] and all(r["status"] == "success" for r in rows)
    assert sum(r["bytes"] for r in rows) == want["chunk_bytes"]


def test_nfs3_results_and_arguments_agree_with_tshark_44(tshark44, tmp_path):
    """NFSv3 calls and their replies' bodies (rpcrdma_frames.nfs3_messages: NULL, GETATTR, LOOKUP, ACCESS,
    READ, WRITE, CREATE, FSINFO, PATHCONF, an error and a cut body), after an RDMA-CM setup by which tshark
    4.4 finds each reply's call: every value tshark shows, ibwire shows the same.  tshark repeats the RPC
    and NFS layers of a READ reply whose data came in a write chunk, hence values compared as sets there."""
    path = tmp_path / "nfs3.pcap"
    rpcrdma_frames.write_nfs3_capture(path)
    theirs = leaves(tshark44(path, "-T", "json"), PROTOCOLS)
    ours = leaves(ibwire_json(path), PROTOCOLS)
    repeated = {f for (f, k), v in theirs.items() if k == "rpc.xid" and len(v) == 2}
    wrong = [(k, v, ours.get(k)) for k, v in theirs.items() if k[0] not in repeated and v != ours.get(k)]
    wrong += [(k, v, ours.get(k)) for k, v in theirs.items() if k[0] in repeated and set(v) != set(ours.get(k, []))]
    assert not wrong, wrong[:10]
    names = {k for _, k in theirs}
    assert {"nfs.fattr3.fsid", "nfs.atime", "nfs.wcc_attr.size", "nfs.verifier", "nfs.fsinfo.maxfilesize"} <= names
    assert {"nfs.pathconf.case_preserving", "nfs.access_rights", "nfs.handle_follow", "nfs.set_size"} <= names
    assert {"rpc.repframe", "nfs.data", "nfs.read.eof", "nfs.write.committed", "nfs.dtime"} <= names
    print(f"tshark 4.4: {len(theirs)} rpcordma/rpc/nfs fields, {sum(map(len, theirs.values()))} values; all equal")


def test_cut_nfs3_results_are_flagged_and_never_stop_the_decode(tmp_path):
    """Each NFSv3 reply of rpcrdma_frames.nfs3_messages cut at every 12th byte after its call: every output
    decodes every frame, and a body cut short is flagged as tshark flags it."""
    sent = rpcrdma_frames.nfs3_messages()[:22]  # the calls and replies, without the READ by write chunk
    cut = [
        m
        for call, reply in zip(sent[::2], sent[1::2])
        for n in range(60, len(reply[2]), 12)
        for m in (call, reply[:2] + (reply[2][:n],))
    ]
    path = tmp_path / "cut-nfs3.pcap"
    n = write_capture(path, messages=lambda: cut)
    assert "[Malformed Packet: RPC]" in decodes_every_frame(path, n, "nfs.fattr3.size")


def test_frame_protocols_are_tsharks(tshark44, capture):
    """frame.protocols names the storage protocols a frame carries, as its document shows them and as
    tshark 4.4 names them (`…:rpcordma:rpc:nfs`; before, every payload was `data`): frame by frame it lists the
    document's layers, and on every frame whose layers are tshark's it is tshark's (the deliberate differences
    of the module's docstring aside)."""
    theirs = tshark44(capture, "-T", "json")
    assert protocols_follow(theirs, ibwire_json(capture)) >= 10
