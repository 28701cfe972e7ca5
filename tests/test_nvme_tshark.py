"""NVMe-oF over RDMA against tshark 4.4 (Debian 13's, the tshark44 fixture) on the public NVMe-oF captures:
every nvme.* / nvme-rdma.* field both decode has the same value in the same frame, and ibwire decodes at
least 95% of what tshark decodes: the capsules (commands, completions, fabrics commands, RDMA-CM private
data, the links from data frames to their command) and the data structures transfers carry (Identify
Controller data, the discovery log page, the Connect command's data; dissectors.nvmedata).  On the shipped
sample captures/nvme-rdma.pcap (ibwire synth) both count the ground truth its scenario declares."""

import json
from pathlib import Path

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from storage_oracle import declared_counts, moved, storage_rows

DISCOVER = "m3_nvme_nvme-discover.pcap"
ECHO = "m3_nvme_host-echo_dump.pcap"
# tshark's fields that decode the data a transfer carries (dissectors.nvmedata)
TRANSFERRED = ("nvme.cmd.identify.ctrl.", "nvme.cmd.get_logpage.identify.", "nvme.fabrics.cmd.connect.data.")


def leaves(documents) -> dict:
    """(frame, key) -> text of every nvme* leaf of tshark -T json documents."""
    out = {}
    for doc in documents:
        layers = doc["_source"]["layers"]
        frame = int(layers["frame"]["frame.number"])

        def walk(obj, frame):
            for key, value in obj.items():
                if isinstance(value, dict):
                    walk(value, frame)
                elif key.startswith("nvme"):
                    out[(frame, key)] = value

        walk({k: v for k, v in layers.items() if k.startswith("nvme")}, frame)
    return out


def same(key, theirs: str, ours: str) -> bool:
    if key.endswith("cmd_latency"):  # milliseconds, printed as the double it is
        return abs(float(theirs) - float(ours)) < 1e-6
    return theirs == ours


def test_nvme_fields_agree_with_tshark_44(tshark44, public_dir):
    capture = public_dir / DISCOVER
    theirs = leaves(json.loads(tshark44(capture, "-T", "json")))
    done = run_ibwire("decode", "-T", "json", capture)
    assert done.returncode == 0, done.stderr
    ours = leaves(json.loads(done.stdout))
    both = [k for k in theirs if k in ours]
    wrong = [(k, theirs[k], ours[k]) for k in both if not same(k[1], theirs[k], ours[k])]
    assert not wrong, wrong[:10]
    missing = [k for k in theirs if k not in ours]
    data = [k for k in theirs if k[1].startswith(TRANSFERRED)]
    print(
        f"tshark 4.4: {len(theirs)} nvme fields ({len(data)} in transferred data structures); ibwire agrees on "
        f"{len(both)} ({len(both) / len(theirs):.1%}), misses {len(missing)}"
    )
    assert len(data) > 290 and all(k in ours for k in data), [k for k in data if k not in ours][:20]
    assert len(both) / len(theirs) >= 0.95, missing[:20]


# frame -> where its payload starts, of the discover capture's packets that carry a data structure
STRUCTURES = {11: 58, 36: 70, 37: 54, 38: 54, 39: 54, 46: 70, 52: 70, 53: 54}


def test_damaged_data_structures_decode_in_every_output(public_dir, tmp_path):
    """The discover capture with the bytes of every packet that carries a data structure (Connect data,
    Identify Controller, the discovery log) scrambled, and two of them cut in half: every output shows every
    frame and ends well."""
    import random
    import struct

    data, rng = (public_dir / DISCOVER).read_bytes(), random.Random(31)
    out, off, n = bytearray(data[:24]), 24, 0
    while off < len(data):
        head = struct.unpack_from("<IIII", data, off)
        pkt, n = bytearray(data[off + 16 : off + 16 + head[2]]), n + 1
        if n in STRUCTURES:  # the payload after the headers (RETH, AETH or none), the ICRC kept
            at = STRUCTURES[n]
            pkt[at:-4] = bytes(rng.randrange(256) for _ in pkt[at:-4])
            pkt = pkt[: len(pkt) // 2] if n in (37, 53) else pkt
        out += struct.pack("<IIII", head[0], head[1], len(pkt), len(pkt)) + pkt
        off += 16 + head[2]
    capture = tmp_path / "damaged.pcap"
    capture.write_bytes(out)
    for args in (["-V"], ["-T", "json"], ["-T", "fields", "-e", "nvme.cmd.identify.ctrl.subnqn"], []):
        done = run_ibwire("decode", *args, capture)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert run_ibwire("decode", "-V", capture).stdout.count("\nFrame ") + 1 == n
    shown = _fields(
        capture, "-Y", "nvme.cmd.identify.ctrl.vid || nvme.fabrics.cmd.connect.data.hostid", "-e", "frame.number"
    )
    assert [row[0] for row in shown] == ["11", "36"]  # still decoded as the structures they carry


def _fields(capture, *args):
    done = run_ibwire("decode", *args, "-T", "fields", "-E", "separator=,", capture)
    assert done.returncode == 0, done.stderr
    return [line.split(",") for line in done.stdout.splitlines()]


def test_decode_as_reassembles_sends_and_matches_transfers(public_dir):
    """host-echo has no connection setup: with -d nvme-rdma the 4160-byte capsules sent as SEND First ..
    Last are one Write command (64-byte SQE, 4096 bytes in-capsule), every command meets its completion,
    and the RDMA READ the target issues for the keyed SGL moves exactly the SGL's length."""
    capture = public_dir / ECHO
    rows = _fields(
        capture,
        "-d",
        "nvme-rdma",
        "-Y",
        "nvme.cmd.opc",
        "-e",
        "frame.number",
        "-e",
        "nvme.cmd.opc",
        "-e",
        "nvme-rdma.reassembled.length",
        "-e",
        "nvme.cmd.cid",
        "-e",
        "nvme.cmd.sgl1.len",
    )
    by_frame = {int(r[0]): r for r in rows}
    assert by_frame[13][1:3] == ["0x01", "4160"] and by_frame[54][1:3] == ["0x01", "4160"]
    assert by_frame[21][1] == "0x01" and by_frame[21][4] == "20480"
    done = _fields(capture, "-d", "nvme-rdma", "-Y", "nvme.cqe.cid", "-e", "nvme.cmd_pkt")
    assert sorted(int(r[0]) for r in done) == sorted(by_frame)  # every command completed once
    moved = _fields(
        capture, "-d", "nvme-rdma", "-Y", "nvme.fabrics.cmd_pkt == 21 && payload.length", "-e", "payload.length"
    )
    assert sum(int(r[0]) for r in moved) == 20480


def test_without_decode_as_no_queue_is_guessed(public_dir):
    """No RDMA-CM setup and no -d: SENDs stay transport payload (Wireshark does the same)."""
    assert _fields(public_dir / ECHO, "-Y", "nvme", "-e", "frame.number") == []


@pytest.mark.parametrize("bad", ["nvme", "udp.port==4791,lnet"])
def test_decode_as_names_what_it_takes(public_dir, bad):
    done = run_ibwire("decode", "-d", bad, public_dir / ECHO)
    assert done.returncode != 0
    assert "-d takes nvme-rdma" in done.stderr and "Traceback" not in done.stderr


def _keys(value):
    """The keys of a -T json item, in order, trees as (key, keys) pairs."""
    return [(k, _keys(v)) for k, v in value] if isinstance(value, list) else None


def _protocols(text: str) -> dict:
    """frame -> (frame.protocols, the nvme* layers in order as (name, its keys)) of -T json documents."""
    out = {}
    for doc in json.loads(text, object_pairs_hook=lambda pairs: pairs):
        layers = dict(dict(doc)["_source"])["layers"]
        frame = dict(dict(layers)["frame"])
        out[int(frame["frame.number"])] = (
            frame["frame.protocols"],
            [(k, _keys(v)) for k, v in layers if k.startswith("nvme")],
        )
    return out


@pytest.mark.parametrize("capture", [DISCOVER, ECHO])
def test_nvme_protocols_present_where_tshark_44_shows_them(tshark44, public_dir, capture):
    """Every frame's nvme and nvme-rdma layers (-T json, in order, their items in tshark's order) and
    frame.protocols, and the frames `-Y nvme`, `-Y nvme-rdma` and `-Y "nvme-rdma && !nvme"` select, as tshark
    4.4's: a fabrics command, its data and its completion show nvme-rdma alone (nvme.fabrics.* inside it), an
    admin command nvme-rdma then nvme.  Apart, by design: the RDMA-CM REQs, whose NVMe-oF private data tshark
    leaves as infiniband.cm.req.ip_cm.private."""
    path = public_dir / capture
    theirs, ours = _protocols(tshark44(path, "-T", "json")), _protocols(run_ibwire("decode", "-T", "json", path).stdout)
    reqs = {int(r[0]) for r in _fields(path, "-Y", "nvme-rdma.cm.req.qid", "-e", "frame.number")}
    assert len(reqs) == (capture == DISCOVER), reqs
    for n in reqs:
        assert [k for k, _ in ours[n][1]] == ["nvme-rdma"] and theirs[n] == (ours[n][0].removesuffix(":nvme-rdma"), [])
    assert {n: v for n, v in ours.items() if n not in reqs} == {n: v for n, v in theirs.items() if n not in reqs}
    for filt in ("nvme", "nvme-rdma", "nvme-rdma && !nvme", "nvme && nvme.fabrics.cmd_pkt"):
        selected = {int(r[0]) for r in _fields(path, "-Y", filt, "-e", "frame.number")}
        wanted = tshark44(path, "-Y", filt, "-T", "fields", "-e", "frame.number").split()
        assert selected - reqs == set(map(int, wanted)), filt
    if capture == DISCOVER:
        assert sum("nvme" in dict(layers) for _, layers in theirs.values()) == 13  # of 32 frames with nvme-rdma


def test_declared_queues_show_their_protocols_as_the_document_does(public_dir):
    """host-echo with -d nvme-rdma (tshark 4.4 has no such Decode As, and without it shows no NVMe, as ibwire):
    the frames `-Y nvme` and `-Y nvme-rdma` select are those whose -T json document has that layer (the capsules
    both, the RDMA READ responses of Write data nvme alone: their queue id is unknown), and frame.protocols ends
    in nvme-rdma on exactly the frames with either."""
    path = public_dir / ECHO
    doc = _protocols(run_ibwire("decode", "-d", "nvme-rdma", "-T", "json", path).stdout)
    for proto in ("nvme", "nvme-rdma"):
        selected = [int(r[0]) for r in _fields(path, "-d", "nvme-rdma", "-Y", proto, "-e", "frame.number")]
        assert (
            selected == [n for n, (_, layers) in doc.items() if proto in dict(layers)]
            and len(selected) == {"nvme": 40, "nvme-rdma": 20}[proto]
        ), proto
    assert all(protocols.endswith(":nvme-rdma") == bool(layers) for protocols, layers in doc.values())


@pytest.mark.parametrize("qid", [0, 1])
def test_data_read_from_the_host_holds_its_nvme_layer(tshark44, tmp_path, qid):
    """Crafted queues (tests/nvme_frames.py), the admin queue and an I/O queue: the nvme layer of data the target
    reads from the host (RDMA READ response) lies in nvme-rdma.read_from_host_resp_tree (an I/O command's with
    nothing in it, Firmware Image Download's and Security Send's with nvme.data), that of data written to the
    host beside nvme-rdma (Security Receive's nvme.data, a Read's empty one); every frame's layers, values and
    frame.protocols, and the frames -Y nvme, -Y nvme-rdma and -Y nvme.data select, as tshark 4.4's.  Apart: the
    REQ (frame 1, as above) and the Timestamp feature's data (frame 5 of the admin queue), which ibwire shows
    as bytes."""
    import nvme_frames

    path = tmp_path / f"queue{qid}.pcap"
    nvme_frames.write_capture(path, qid)
    theirs_text, ours_text = tshark44(path, "-T", "json"), run_ibwire("decode", "-T", "json", path).stdout
    apart = {1, 5} if qid == 0 else {1}
    theirs, ours = _protocols(theirs_text), _protocols(ours_text)
    assert {n: v for n, v in ours.items() if n not in apart} == {n: v for n, v in theirs.items() if n not in apart}
    theirs, ours = leaves(json.loads(theirs_text)), leaves(json.loads(ours_text))
    assert [k for k in theirs if k[0] not in apart and not (k in ours and same(k[1], theirs[k], ours[k]))] == []
    for filt in ("nvme", "nvme-rdma", "nvme.data"):
        selected = {int(r[0]) for r in _fields(path, "-Y", filt, "-e", "frame.number")}
        wanted = tshark44(path, "-Y", filt, "-T", "fields", "-e", "frame.number").split()
        assert selected - apart == set(map(int, wanted)) - apart, filt
    assert {n for n, (_, layers) in _protocols(theirs_text).items() if "read_from_host_resp_tree" in str(layers)} == (
        {5, 9, 13} if qid == 0 else {5}
    )


SAMPLE = Path(__file__).resolve().parents[1] / "captures" / "nvme-rdma.pcap"


def _count(tshark44, filt: str) -> int:
    return len(tshark44(SAMPLE, "-Y", filt, "-T", "fields", "-e", "frame.number").split())


def test_nvme_sample_ground_truth_as_tshark_44_and_ibwire_count_it(tshark44):
    """captures/nvme-rdma.pcap (ibwire synth): tshark 4.4 finds the declared commands (I/O and Fabrics
    Connect), completions and data bytes (the payloads of RDMA WRITEs and READ responses); the storage view
    has every command completed successfully, with its latency, and those bytes."""
    want = declared_counts(SAMPLE)
    io, fabrics = _count(tshark44, "nvme.cmd.opc"), _count(tshark44, "nvme.fabrics.cmd.opc")
    assert (io + fabrics, _count(tshark44, "nvme.fabrics.cmd.fctype == 1")) == (
        want["nvme_commands"],
        want["nvme_connects"],
    )
    assert (_count(tshark44, "nvme.cqe.cid"), moved(tshark44, SAMPLE)) == (want["nvme_completions"], want["data_bytes"])
    rows = storage_rows(SAMPLE, "commands")
    assert len(rows) == want["nvme_commands"] and sum(r["opcode"] == "Connect" for r in rows) == want["nvme_connects"]
    assert all(r["status"] == "Successful Completion" and r["latency_us"] > 0 for r in rows)
    assert sum(r["completion"] is not None for r in rows) == want["nvme_completions"]
    assert sum(r["bytes"] for r in rows) == want["data_bytes"]


def test_nvme_sample_fields_agree_with_tshark_44(tshark44):
    """Every nvme* value tshark 4.4 shows in the sample ibwire shows with the same value in the same frame,
    and every frame's nvme layers and frame.protocols are tshark's, the RDMA-CM REQs (their private data
    tshark leaves as infiniband.cm.req.ip_cm.private) apart."""
    theirs_text, ours_text = tshark44(SAMPLE, "-T", "json"), run_ibwire("decode", "-T", "json", SAMPLE).stdout
    theirs, ours = leaves(json.loads(theirs_text)), leaves(json.loads(ours_text))
    reqs = {int(r[0]) for r in _fields(SAMPLE, "-Y", "nvme-rdma.cm.req.qid", "-e", "frame.number")}
    assert len(reqs) == 2 and len(theirs) > 500
    assert [k for k in theirs if k[0] not in reqs and not (k in ours and same(k[1], theirs[k], ours[k]))] == []
    theirs, ours = _protocols(theirs_text), _protocols(ours_text)
    assert {n: v for n, v in ours.items() if n not in reqs} == {n: v for n, v in theirs.items() if n not in reqs}
