"""iSER against tshark 4.4 (Debian 13's, the tshark44 fixture) on frames crafted byte by byte from
RFC 7145 and RFC 7143 (tests/iser_frames.py): every iser.* / iscsi.* / scsi.* / scsi_sbc.* value tshark shows
is shown by ibwire with the same value, in the same frame.

tshark is run with `-d infiniband,iser` and its RPC-over-RDMA heuristic off: on RoCE, tshark 4.4 finds the
RDMA-CM conversation only for the SENDs to the initiator's queue pair (its IB ports are the destination QP
alone), and its RPC-over-RDMA heuristic claims, and fails on, an iSER message whose header has only the read
STag valid (every SCSI READ command), so without both it would show none of the initiator's PDUs.
Deliberate differences, each with its reason:
- SEND First/Last: tshark 4.4 does not reassemble iSER; it decodes the First packet alone (cut short) and
  leaves the Last as data.  ibwire reassembles the SEND per QP and decodes the PDU in the Last packet.
- a SCSI Response: tshark 4.4 keeps an iSCSI session per direction on RoCE, so it never finds the command a
  response answers and shows scsi.lun 0xffff; ibwire matches it by ITT and shows the command's LUN (with
  scsi.request_frame and scsi.time, and for a status other than Check Condition the command's scsi_sbc.opcode
  and scsi.status, as tshark 4.4 does when it finds the command: tests/test_lab_iser.py).  Those fields of
  responses are not compared.
- RDMA WRITE / READ response payloads of the connection: tshark's iSER heuristic claims them without adding
  anything (no `data` layer); ibwire shows them as `data`.  Only iser/iscsi/scsi fields are compared.
"""

import iser_frames
import pytest
from iser_frames import write_capture
from one_process import ibwire_runs
from storage_oracle import (
    agreement,
    damaged,
    declared_counts,
    decodes_every_frame,
    frames_with,
    ibwire_json,
    moved,
    protocols_follow,
    storage_rows,
    tshark_filtered,
)
from storage_oracle import leaves as tree_leaves

PROTOCOLS = ("iser", "iscsi", "scsi", "iscsi.flags", "iscsi.flags_tree")
PREFIXES = ("iser", "iscsi", "scsi", "scsi_sbc")
DECLARED = ("-d", "infiniband,iser", "--disable-heuristic", "rpcrdma_infiniband")
SPLIT = {"0", "1", "2"}  # SEND First, Middle, Last


def leaves(text: str):
    """((frame, key) -> [texts] of every iser/iscsi/scsi leaf of -T json documents, frames of SENDs split
    in several packets)."""
    return tree_leaves(text, PROTOCOLS, PREFIXES), frames_with(text, "infiniband.bth.opcode", SPLIT)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("iser") / "iser.pcap"
    write_capture(path)
    return path


def test_iser_fields_agree_with_tshark_44(tshark44, capture):
    theirs, split = leaves(tshark44(capture, *DECLARED, "-T", "json"))
    ours, _ = leaves(ibwire_json(capture))
    responses = {f for (f, k), v in theirs.items() if k == "iscsi.opcode" and v == ["0x21"]}
    theirs = {k: v for k, v in theirs.items() if k[0] not in split}
    compared, wrong, missing, values = agreement(theirs, ours, lambda k: k[0] in responses and k[1] == "scsi.lun")
    assert not wrong, wrong[:10]
    print(
        f"tshark 4.4: {len(theirs)} iser/iscsi/scsi fields in {len({f for f, _ in theirs})} frames; ibwire has "
        f"the same values of {len(compared)} ({values} values); not shown: {missing}"
    )
    assert not missing
    assert {f for f, _ in ours} >= {f for f, _ in theirs} | {max(split)}  # the reassembled Last too


def test_rdma_cm_setup_decides_as_tshark(tshark44, capture):
    """Without -d: tshark 4.4 decodes iSER on the queue pairs an RDMA-CM REQ for port 3260 connected (on
    RoCE only the initiator's side, module doc); ibwire decodes those frames with the same values, and the
    target's side too."""
    theirs, _ = leaves(tshark44(capture, "--disable-heuristic", "rpcrdma_infiniband", "-T", "json"))
    ours, _ = leaves(ibwire_json(capture))
    assert theirs and all(ours.get(k) == v for k, v in theirs.items() if k[1] != "scsi.lun")
    assert len({f for f, _ in ours}) > len({f for f, _ in theirs})


@pytest.fixture(scope="module")
def undeclared(tmp_path_factory):
    path = tmp_path_factory.mktemp("iser") / "undeclared.pcap"
    write_capture(path, connect=False, messages=iser_frames.undeclared)
    return path


def test_decode_as_takes_what_no_connection_names(tshark44, undeclared):
    """No RDMA-CM setup: neither tool decodes iSER; with tshark's `-d infiniband,iser` both decode the
    valid message with the same values (a header whose opcode is not iSER's stays undecoded)."""
    assert leaves(tshark44(undeclared, "-T", "json"))[0] == {}
    assert leaves(ibwire_json(undeclared))[0] == {}
    theirs, _ = leaves(tshark44(undeclared, "-d", "infiniband,iser", "-T", "json"))
    ours, _ = leaves(ibwire_json(undeclared, "-d", "infiniband,iser"))
    assert {f for f, _ in theirs} == {f for f, _ in ours} == {1}
    assert theirs == ours


RESPONSE = " && iscsi.opcode != 0x21"  # ibwire's SCSI layer of matched responses (module doc)
FILTERS = (
    "iser",
    "iscsi",
    "scsi" + RESPONSE,
    "iser.flags.rsv == 1",
    "iser.read_stag == 0xab01",
    "iser.write_base_offset == 0x7f0000300000",
    "iscsi.opcode == 0x01",
    "iscsi.scsicommand.R == 1",
    "scsi_sbc.opcode == 0x28" + RESPONSE,
    "scsi_sbc.rdwr10.lba == 0x800",
    "scsi_sbc.rdwr12.xferlen == 8",
    "iscsi.scsiresponse.status == 2",
    'iscsi.keyvalue contains "SendTargets"',
    "iscsi.login.status == 0",
    "iscsi.taskmanfun.function == 1",
    "iscsi.initiatortasktag == 0x22",
    "scsi.sns.asc == 0x24",
    "iser.ird",
)


def test_filters_and_columns_select_tsharks_frames(tshark44, capture):
    """-Y selects tshark's frames and -T fields -e prints tshark's values (SEND First/Last aside)."""
    keys = ["frame.number", "iser.flags", "iscsi.opcode", "iscsi.initiatortasktag", "scsi_sbc.opcode", "scsi.lun"]
    split = {str(n) for n in leaves(ibwire_json(capture))[1]}
    tsharks = tshark_filtered(tshark44, capture, FILTERS, keys, "|", *DECLARED)
    runs = [
        ["decode", "-Y", text, *(a for k in keys for a in ("-e", k)), "-T", "fields", "-E", "separator=|", capture]
        for text in FILTERS
    ]
    for text, out in zip(FILTERS, ibwire_runs(runs)):
        assert [_lun(r) for r in out.splitlines() if r.split("|")[0] not in split] == [
            _lun(r) for r in tsharks[text] if r.split("|")[0] not in split
        ], text


def _lun(row: str) -> str:
    """A row without the scsi_sbc.opcode and scsi.lun of a SCSI Response (module doc)."""
    cells = row.split("|")
    return "|".join(cells[:-2] + ["", ""]) if cells[2] == "0x21" else row


def test_damaged_messages_never_stop_the_decode(tmp_path):
    """Every message cut at every length and with its bytes flipped: every output decodes every frame."""
    cut = damaged(iser_frames.messages(), iser_frames.SEND_ONLY, 60, 11, (9, 5))
    path = tmp_path / "damaged.pcap"
    n = write_capture(path, messages=lambda: cut)
    # a PDU cut inside its data
    assert "[Malformed Packet: iSCSI]" in decodes_every_frame(path, n, "iscsi.opcode", "-d", "iser")


def _tshark_commands(tshark44, capture) -> dict:
    """ITT -> the command row derived from tshark's own frames: SCSI Command frame, its STags' RDMA WRITE
    and READ response bytes (a response matched to its request by PSN), immediate and Data-Out bytes, the
    SCSI Response frame of the same ITT, its status (single-packet RDMA messages, as the capture has)."""
    keys = "frame.number ip.len infiniband.bth.opcode infiniband.bth.psn infiniband.bth.padcnt infiniband.reth.r_key"
    keys += " iscsi.opcode iscsi.initiatortasktag iser.write_stag iser.read_stag iscsi.datasegmentlength"
    keys += " iscsi.scsiresponse.status"
    args = [a for k in keys.split() for a in ("-e", k)]
    out = tshark44(capture, *DECLARED, "-T", "fields", "-E", "separator=,", *args)
    frames = [dict(zip(keys.split(), line.split(","))) for line in out.splitlines()]
    # RDMA WRITE Only and READ Response Only payloads (tshark's iSER heuristic takes them, showing nothing):
    # the IP length less the IP, UDP, BTH, RETH or AETH, ICRC and pad bytes
    ext = {"10": 16, "16": 4}
    payload = {
        f["frame.number"]: int(f["ip.len"])
        - 20
        - 8
        - 12
        - ext[f["infiniband.bth.opcode"]]
        - 4
        - int(f["infiniband.bth.padcnt"])
        for f in frames
        if f["infiniband.bth.opcode"] in ext
    }
    cmds, by_stag, reads = {}, {}, {}
    for f in frames:
        itt, op = f["iscsi.initiatortasktag"], f["iscsi.opcode"]
        if op == "0x01":
            cmds[itt] = {"submission": int(f["frame.number"]), "bytes": int(f["iscsi.datasegmentlength"])}
            cmds[itt].update(completion=None, status=None)
            by_stag.update({s: cmds[itt] for s in (f["iser.write_stag"], f["iser.read_stag"]) if int(s, 16)})
        elif op == "0x05" and itt in cmds:
            cmds[itt]["bytes"] += int(f["iscsi.datasegmentlength"])
        elif op == "0x21" and itt in cmds:
            cmds[itt].update(completion=int(f["frame.number"]), status=int(f["iscsi.scsiresponse.status"], 16))
        elif f["infiniband.bth.opcode"] == "12":
            reads[f["infiniband.bth.psn"]] = f["infiniband.reth.r_key"]
        key = f["infiniband.reth.r_key"] if f["infiniband.bth.opcode"] == "10" else None
        key = reads.get(f["infiniband.bth.psn"]) if f["infiniband.bth.opcode"] == "16" else key
        if key in by_stag and f["frame.number"] in payload:
            by_stag[key]["bytes"] += int(payload[f["frame.number"]])
    return {itt: c for itt, c in cmds.items()}


def test_storage_view_times_every_command_as_tsharks_frames_say(tshark44, capture):
    """stats --storage: one row per SCSI command with its response frame, status and bytes as derived from
    tshark's frames."""
    want = _tshark_commands(tshark44, capture)
    ours = {r["itt"]: r for r in storage_rows(capture, "iser_commands")}
    assert sorted(ours) == sorted(want)
    names = {0: "Good", 2: "Check Condition"}
    for itt, w in want.items():
        got = ours[itt]
        assert (got["submission"], got["completion"], got["bytes"], got["status"]) == (
            w["submission"],
            w["completion"],
            w["bytes"],
            names[w["status"]],
        ), itt


def test_iser_sample_ground_truth_as_tshark_and_ibwire_count_it(tshark44):
    """captures/iser-rdma.pcap (ibwire synth): tshark 4.4 (-d, module doc) finds the declared SCSI commands,
    responses and data bytes (the payloads of RDMA WRITEs and READ responses), and the storage view has
    every command answered Good with those bytes."""
    pcap = iser_frames.CAPTURES / "iser-rdma.pcap"
    want = declared_counts(pcap)
    commands = tshark44(pcap, *DECLARED, "-Y", "iscsi.opcode == 0x01").splitlines()
    responses = tshark44(pcap, *DECLARED, "-Y", "iscsi.opcode == 0x21").splitlines()
    assert (len(commands), len(responses), moved(tshark44, pcap)) == (
        want["scsi_commands"],
        want["scsi_responses"],
        want["data_bytes"],
    )
    rows = storage_rows(pcap, "iser_commands")
    assert len(rows) == want["scsi_commands"] and all(r["status"] == "Good" for r in rows)
    assert sum(r["bytes"] for r in rows) == want["data_bytes"]


def test_frame_protocols_are_tsharks(tshark44, capture):
    """frame.protocols names the storage protocols a frame carries, as its document shows them and as
    tshark 4.4 names them (`…:iser:iscsi`; before, every payload was `data`): frame by frame it lists the
    document's layers, and on every frame whose layers are tshark's it is tshark's (the deliberate differences
    of the module's docstring aside)."""
    theirs = tshark44(capture, *DECLARED, "-T", "json")
    assert protocols_follow(theirs, ibwire_json(capture)) >= 10
