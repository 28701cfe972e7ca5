"""RPC-over-RDMA version 2 (draft-ietf-nfsv4-rpcrdma-version-two-02) against tshark 4.4 (the tshark44
fixture) and against what the frames declare (tests/rpcrdma_frames.py's v2_pairs).

tshark 4.4 decodes no version 2 message (packet-rpcrdma.c returns at a version word other than 1, with -d
too).  So each version 2 message has a version 1 twin in a second capture, framed alike: the same XID,
credits, chunk lists and RPC message under version 1's header.  Every rpcordma.* / rpc.* / nfs.* value
tshark shows of a twin is ibwire's of the version 2 frame (version aside; replies' program, version and
procedure aside as in test_rpcrdma_tshark); the items only version 2 has (flags, invalidation handle,
transport properties, version 2's error words) are the values the frames were built with.
"""

import json

import pytest
import rpcrdma_frames
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from rpcrdma_frames import PROTOCOLS, REPLY_CALL, V2_ONLY, v2_pairs, write_capture
from storage_oracle import (
    RDMA_DATA,
    agreement,
    damaged,
    decodes_every_frame,
    ibwire_fields,
    ibwire_json,
    leaves,
    moved,
    rdma_keys,
    rows_agree,
    storage_rows,
    tshark_frames,
)

REASSEMBLY = ("rpcordma.fragment", "rpcordma.fragment.count", "rpcordma.reassembled.length")
REASSEMBLY += ("rpcordma.reassembled.data",)


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """(version 2 capture, its version 1 twin)."""
    folder, pairs = tmp_path_factory.mktemp("rpcrdma-v2"), v2_pairs()
    write_capture(folder / "v2.pcap", messages=lambda: [v2 for v2, _, _ in pairs])
    write_capture(folder / "twin.pcap", messages=lambda: [twin for _, twin, _ in pairs])
    return folder / "v2.pcap", folder / "twin.pcap"


def test_tshark_44_decodes_no_version_2(tshark44, captures):
    """Neither its heuristic nor -d infiniband,rpcordma makes tshark 4.4 show a version 2 header: of the
    version 2 capture it shows only the reassembly of the SEND First/Last (its items are ibwire's too)."""
    v2, _ = captures
    ours = leaves(ibwire_json(v2), PROTOCOLS)
    for args, headers in (((), set()), (("-d", "infiniband,rpcordma"), {11})):
        theirs = leaves(tshark44(v2, *args, "-T", "json"), PROTOCOLS)
        # with -d: frame 11, an RDMA WRITE whose data (an RPC reply, XID then 1) reads as a version 1 header
        assert {f for f, k in theirs if k == "rpcordma.version"} == headers
        assert {k for f, k in theirs if f not in headers} == set(REASSEMBLY)
        assert all(ours[k] == v for k, v in theirs.items() if k[1] in REASSEMBLY)


def test_version_2_fields_agree_with_tshark_44_on_the_twins(tshark44, captures):
    v2, twin = captures
    theirs = leaves(tshark44(twin, "-T", "json"), PROTOCOLS)
    ours = leaves(ibwire_json(v2), PROTOCOLS)
    replies = {f for (f, k), v in theirs.items() if k == "rpc.msgtyp" and v == ["1"]}
    # the version word, and a reassembled SEND's bytes (compared with tshark's own reassembly of version 2)
    apart = ("rpcordma.version", "rpcordma.reassembled.length", "rpcordma.reassembled.data")
    compared, wrong, missing, values = agreement(
        theirs, ours, lambda k: k[1] in apart or k[0] in replies and k[1] in REPLY_CALL
    )
    assert not wrong and not missing, (wrong[:10], missing)
    frames = {f for f, _ in theirs}
    assert all(ours[(f, "rpcordma.version")] == ["2"] for f in frames if (f, "rpcordma.version") in theirs)
    print(
        f"tshark 4.4 on the version 1 twins: {len(theirs)} rpcordma/rpc/nfs fields in {len(frames)} frames, "
        f"{values} values of {len(compared)} compared, all equal"
    )
    assert len(compared) >= 250


def test_version_2_items_are_the_declared_ones(captures):
    """Flags, invalidation handle, properties and error words: -T json holds the values the frames were
    built with, in every frame, and -T fields and -Y agree."""
    v2, _ = captures
    ours = leaves(ibwire_json(v2), PROTOCOLS)
    for frame, (_, _, declared) in enumerate(v2_pairs(), 1):
        got = {k: v for (f, k), v in ours.items() if f == frame and k in V2_ONLY}
        assert got == declared, frame
    rows = ibwire_fields(v2, "-Y", "rpcordma.flags.response == 1", "-e", "frame.number", "-e", "rpcordma.flags")
    want = [
        f"{n},{d['rpcordma.flags'][0]}"
        for n, (_, _, d) in enumerate(v2_pairs(), 1)
        if d.get("rpcordma.flags.response") == ["1"]
    ]
    assert rows == want
    assert ibwire_fields(v2, "-Y", "rpcordma.prop_id == 6", "-e", "rpcordma.prop_data") == [b"host-key".hex()]


def test_every_output_names_version_2(captures):
    """-V words the header types and flags, the summary and -T jsonl carry them; a header type of a later
    draft and a version ibwire does not know are flagged (given -d), never decoded past the common words."""
    v2, _ = captures
    text = run_ibwire("decode", "-V", v2, check=True).stdout
    assert "Message Type: RDMA2_CONNPROP (5)" in text and "Error code: RDMA2_ERR_WRITE_RESOURCE (9)" in text
    assert ".... .... .... .... .... .... .... ..1. = RDMA2_F_MORE: Set" in text
    summary = run_ibwire("decode", "-d", "rpcordma", v2, check=True).stdout.splitlines()
    assert "RDMA2_GRANT XID 0x0" in summary[-2] and "header type 10 unknown" in summary[-1]
    assert "V3 LOOKUP Call  [RPC message of 188 bytes joined from RDMA2_F_MORE messages]" in summary[-6]
    docs = [json.loads(line) for line in run_ibwire("decode", "-T", "jsonl", v2, check=True).stdout.splitlines()]
    handles = [d["layers"]["rpcordma"]["inv_handle"] for d in docs if "inv_handle" in d["layers"].get("rpcordma", {})]
    assert [h for h in handles if h] == [0xABC, 0xDEF, 0x123]


def test_damaged_version_2_messages_never_stop_the_decode(tmp_path):
    """Every version 2 message cut at every fifth length and with bytes flipped, all taken as RPC-RDMA."""
    cut = damaged([v2 for v2, _, _ in v2_pairs()], rpcrdma_frames.SEND_ONLY, 8, 5, (7, 3))
    path = tmp_path / "damaged-v2.pcap"
    n = write_capture(path, messages=lambda: cut)
    assert "[Malformed Packet: RPC]" in decodes_every_frame(path, n, "rpcordma.flags", "-d", "rpcordma")


SCENARIO = """[scenario]
name = "nfs-v{version}"
link = "roce2"
latency_us = 2
[[port]]
name = "client"
guid = "0x0002c90300003101"
lid = 1
ip = "10.31.0.1"
[[port]]
name = "server"
guid = "0x0002c90300003201"
lid = 2
ip = "10.31.0.2"
"""
CONNECTIONS = (("getattr", 3, 512), ("read", 3, 6000), ("write", 2, 3000), ("compound", 2, 512))


def _synth(tmp_path, version: int, cm: bool):
    text = SCENARIO.format(version=version)
    for i, (op, count, size) in enumerate(CONNECTIONS):
        text += f"[[nfs]]\nclient = 'client'\nserver = 'server'\nclient_qpn = {0x310 + i}\nserver_qpn = {0x320 + i}\n"
        text += f"op = '{op}'\ncount = {count}\nsize = {size}\nat_us = {100 + 300 * i}\nxid = {0x1000 * (i + 1)}\n"
        text += f"cm = {str(cm).lower()}\nversion = {version}\n"
    (tmp_path / f"v{version}.toml").write_text(text)
    pcap = tmp_path / f"v{version}-{cm}.pcap"
    run_ibwire("synth", tmp_path / f"v{version}.toml", "-w", pcap, check=True)
    return pcap


def test_synth_version_2_latency_view_is_tsharks_of_the_twin(tshark44, tmp_path):
    """ibwire synth with version = 2 and its version 1 twin (the same scenario, version = 1; no RDMA-CM,
    so the frames align one for one): stats --storage on version 2 has, call by call, the submission,
    completion, latency and bytes tshark 4.4's frames of the twin give (as test_rpcrdma_tshark derives
    them)."""
    v2, twin = _synth(tmp_path, 2, False), _synth(tmp_path, 1, False)
    keys = "frame.number frame.time_epoch infiniband.bth.opcode infiniband.bth.psn infiniband.bth.destqp"
    keys += " infiniband.reth.r_key data.len rpcordma.xid rpcordma.msg_type rpcordma.rdma_handle rpcordma.reads_count rpc.msgtyp"
    frames, calls, by_key = tshark_frames(tshark44, twin, keys), {}, {}
    data = rdma_keys(frames)
    for n, f in frames.items():  # in frame order: the connections use the same handles one after the other
        if data.get(n) in by_key:
            by_key[data[n]]["bytes"] += int(f["data.len"])
        elif f["rpc.msgtyp"] == "0" or f["rpcordma.reads_count"] not in ("", "0"):
            calls[f["rpcordma.xid"]] = {"submission": n, "time": float(f["frame.time_epoch"]), "bytes": 0}
            by_key.update(dict.fromkeys(f["rpcordma.rdma_handle"].split(";"), calls[f["rpcordma.xid"]]))
        elif f["rpc.msgtyp"] == "1" and f["rpcordma.xid"] in calls:
            call = calls[f["rpcordma.xid"]]
            call["completion"] = n
            call["latency_us"] = round((float(f["frame.time_epoch"]) - call["time"]) * 1e6, 3)
    rows = {r["xid"]: r for r in storage_rows(v2, "rpc_calls")}
    assert sorted(rows) == sorted(calls) and len(rows) == sum(c for _, c, _ in CONNECTIONS)
    rows_agree(rows, calls, 0.01)


def test_synth_version_2_ground_truth(tshark44, tmp_path):
    """With RDMA-CM (and so RDMA2_CONNPROP from each side): the storage view has every declared call
    replied, with the chunk bytes tshark 4.4 counts in the RDMA data packets; -Y finds each side's
    properties; -V names every RDMA2_MSG."""
    v2 = _synth(tmp_path, 2, True)
    rows = storage_rows(v2, "rpc_calls")
    declared_bytes = sum(count * size for op, count, size in CONNECTIONS if op in ("read", "write"))
    assert len(rows) == sum(c for _, c, _ in CONNECTIONS) and all(r["status"] == "success" for r in rows)
    assert sum(r["bytes"] for r in rows) == declared_bytes == moved(tshark44, v2)
    assert len(tshark44(v2, "-Y", RDMA_DATA).splitlines()) > 0
    props = ibwire_fields(v2, "-Y", "rpcordma.msg_type == 5 && rpcordma.version == 2", "-e", "rpcordma.prop_value")
    assert props == ["1024,1024,0"] * 2 * len(CONNECTIONS)
    calls = sum(c for _, c, _ in CONNECTIONS)  # -V, from learned programs too: every call and reply named
    text = run_ibwire("decode", "-V", v2, check=True).stdout
    assert (text.count("Message Type: RDMA2_MSG (0)"), text.count("RDMA2_F_RESPONSE: Set")) == (2 * calls, calls)
