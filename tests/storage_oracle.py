"""What the storage protocols' tshark tests share (test_rpcrdma_tshark, test_rpcrdma_v2_tshark,
test_smbdirect_tshark, test_iser_tshark): a crafted conversation framed as RoCEv2 RC packets, -T json leaves
by frame, ibwire's outputs, the damaged-message sweep, the RDMA data each request moved by tshark's own
frames, and a sample capture's declared counts."""

import json
import struct
import tomllib

from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

from dissectors.numbers import GSI_QKEY
from ibwire.files.writers import PcapWriter
from ibwire.synth.headers import DETH, RETH, transport
from ibwire.synth.links import Link

UD_SEND_ONLY, READ_REQUEST, READ_RESPONSE_ONLY, WRITE_ONLY = 0x64, 0x0C, 0x10, 0x0A
# The bytes after the BTH an RDMA WRITE or READ response packet spends on RETH or AETH (IBA §9.2-9.4)
EXT = {"6": 16, "7": 0, "8": 0, "10": 16, "13": 4, "14": 0, "15": 4, "16": 4}
RDMA_DATA = "infiniband.bth.opcode in {6..10, 13..16}"


def write_rc_capture(path, entries, ends: dict, psn: dict) -> int:
    """(sender, opcode, payload, RETH (va, rkey, length) or nothing) entries between the two `ends` (name ->
    (Port, QPN)) as a RoCEv2 pcap, a frame a millisecond; `psn`: each end's first PSN (a READ response
    travels on the PSN of the request before it, a UD SEND Only is a MAD to QP1).  Returns the frame count."""
    link, psn, n = Link("roce2"), dict(psn), 0
    with open(path, "wb") as f:
        w = PcapWriter(f, link.linktype)
        for n, (who, opcode, payload, *reth) in enumerate(entries):
            peer = next(name for name in ends if name != who)
            (src, _), (dst, qpn) = ends[who], ends[peer]
            ext = RETH.pack(*reth[0]) if reth else b""
            if opcode == UD_SEND_ONLY:
                tp = transport(opcode, 0xFFFF, 1, 0, DETH.pack(GSI_QKEY, 1), payload)
            elif opcode == READ_RESPONSE_ONLY:
                tp = transport(opcode, 0xFFFF, qpn, psn[peer] - 1, struct.pack(">I", 0), payload)
            else:
                tp = transport(opcode, 0xFFFF, qpn, psn[who], ext, payload)
                psn[who] += 1
            w.write(link.frame(src, dst, tp), ts=1_700_000_000 + n * 0.001)
    return n + 1


def _walk(items, frame, prefixes, out) -> None:
    for key, value in items:
        if isinstance(value, list):
            _walk(value, frame, prefixes, out)
        elif key.split(".")[0] in prefixes:
            out.setdefault((frame, key), []).append(value)


def _layers(text: str):
    for doc in json.loads(text, object_pairs_hook=lambda pairs: pairs):
        layers = dict(dict(doc)["_source"])["layers"]
        yield int(dict(dict(layers)["frame"])["frame.number"]), layers


def leaves(text: str, protocols, prefixes=None) -> dict:
    """(frame, key) -> [texts] of every leaf of -T json documents in the layers `protocols` whose name
    starts with one of `prefixes` (the protocols' own by default), trees before single items, repeated keys
    kept in order."""
    prefixes = prefixes or {p.split(".")[0] for p in protocols}
    out = {}
    for frame, layers in _layers(text):
        _walk([(k, v) for k, v in layers if k in protocols and isinstance(v, list)], frame, prefixes, out)
        _walk([(k, v) for k, v in layers if k in protocols and not isinstance(v, list)], frame, prefixes, out)
    return out


def agreement(theirs: dict, ours: dict, apart) -> tuple:
    """(the keys of tshark's leaves `theirs` compared, those ibwire shows otherwise as (key, tshark's, ibwire's),
    those ibwire does not show, the values compared): every key of theirs but those `apart(key)` says are
    shown differently by design, and those ibwire lacks."""
    compared = [k for k in theirs if k in ours and not apart(k)]
    wrong = [(k, theirs[k], ours[k]) for k in compared if theirs[k] != ours[k]]
    missing = [k for k in theirs if k not in ours]
    return compared, wrong, missing, sum(len(theirs[k]) for k in compared)


def frames_with(text: str, key: str, values) -> set:
    """The frames of -T json documents whose `key` (the first at any depth) holds one of `values`."""
    return {frame for frame, layers in _layers(text) if _find(layers, key) in values}


def _find(items, want: str):
    for key, value in items if isinstance(items, list) else []:
        found = _find(value, want) if isinstance(value, list) else value if key == want else None
        if found is not None:
            return found
    return None


def ibwire_json(path, *args) -> str:
    done = run_ibwire("decode", *args, "-T", "json", path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ibwire_fields(path, *args, sep: str = ",") -> list:
    done = run_ibwire("decode", *args, "-T", "fields", "-E", f"separator={sep}", path)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def damaged(entries, send_only: int, start: int, step: int, flip: tuple) -> list:
    """Each SEND Only entry of `entries` cut at `start`, `start + step` … bytes, and whole with the bytes
    whose index is flip[1] modulo flip[0] inverted."""
    out = []
    for who, opcode, payload, *_ in entries:
        if opcode == send_only:
            out += [(who, opcode, payload[:n]) for n in range(start, len(payload), step)]
            out.append((who, opcode, bytes(b ^ 0xFF if i % flip[0] == flip[1] else b for i, b in enumerate(payload))))
    return out


def decodes_every_frame(path, frames: int, field: str, *declared) -> str:
    """Every output (text, -T json, -T fields -e `field`, -V, stats --storage) of a capture of damaged
    messages ends well with every frame shown; returns the text output, for the caller's Malformed check."""
    for fmt in ("text", "json", "fields"):
        done = run_ibwire("decode", "-T", fmt, "-e", field, *declared, path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    done = run_ibwire("decode", "-V", *declared, path)
    assert done.returncode == 0 and done.stdout.count("\nFrame ") + 1 == frames
    done = run_ibwire("stats", "--storage", "--format", "json", path)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    return run_ibwire("decode", *declared, path).stdout


def tshark_frames(tshark44, capture, keys: str, *args) -> dict:
    """frame number -> {key: text} of tshark's -T fields for the space-separated `keys` (frame.number
    first)."""
    out = tshark44(capture, *args, "-T", "fields", "-E", "separator=,", *(a for k in keys.split() for a in ("-e", k)))
    return {int(r[0]): dict(zip(keys.split(), r)) for r in (line.split(",") for line in out.splitlines())}


def tshark_filtered(tshark44, capture, filters, keys, sep: str, *args) -> dict:
    """filter -> tshark 4.4's lines of `-Y filter -T fields -e keys… -E separator=sep` (`keys` starting with
    frame.number), from two runs for all the filters: tshark's lines of every frame, and the frames each filter
    displays, a custom column a filter holding it as a logical test (tshark 4.4 shows ✓ where it holds).
    tshark's one pass dissects every frame alike whatever -Y hides, so a filter's lines are its frames' lines;
    the first filter is run as -Y too, and must give the same lines."""
    fields = ["-T", "fields", "-E", f"separator={sep}", *(a for k in keys for a in ("-e", k))]
    rows = {line.split(sep)[0]: line for line in tshark44(capture, *args, *fields).splitlines()}
    quoted = [f.replace("\\", "\\\\").replace('"', '\\"') for f in filters]
    columns = ",".join(['"No.","%m"'] + [f'"{i}","%Cus:({f}) && frame"' for i, f in enumerate(quoted)])
    marks = tshark44(capture, *args, "-T", "tabs", "-o", f"gui.column.format:{columns}").splitlines()
    marks = [line.split("\t") + [""] * len(filters) for line in marks]
    out = {f: [rows[m[0].strip()] for m in marks if m[i + 1] == "✓"] for i, f in enumerate(filters)}
    assert out[filters[0]] == tshark44(capture, *args, "-Y", filters[0], *fields).splitlines(), filters[0]
    return out


def rdma_keys(frames: dict) -> dict:
    """frame -> the R_Key of the memory its data went to or came from: an RDMA WRITE's (named in its First
    or Only packet), an RDMA READ response's request's (found by the PSN of its First or Only packet);
    `frames` must hold infiniband.bth.opcode, .psn, .destqp and infiniband.reth.r_key."""
    reads, current, out = {}, {}, {}
    for n, f in frames.items():
        op, qp = int(f["infiniband.bth.opcode"]), f["infiniband.bth.destqp"]
        if op == 12:
            reads[f["infiniband.bth.psn"]] = f["infiniband.reth.r_key"]
        elif op in (6, 10) or op in (13, 16):
            current[qp] = f["infiniband.reth.r_key"] if op in (6, 10) else reads.get(f["infiniband.bth.psn"])
        if 6 <= op <= 10 and op != 9 or 13 <= op <= 16:
            out[n] = current.get(qp)
    return out


def moved(tshark44, pcap, *args) -> int:
    """The payload bytes of every RDMA WRITE and READ response by tshark's IP lengths (IPv4, no options):
    a heuristic that takes a payload and shows nothing of it leaves data.len missing."""
    keys = ("ip.len", "infiniband.bth.opcode", "infiniband.bth.padcnt")
    out = tshark44(pcap, *args, "-Y", RDMA_DATA, "-T", "fields", *(a for k in keys for a in ("-e", k)))
    rows = [line.split("\t") for line in out.splitlines()]
    return sum(int(n) - 20 - 8 - 12 - EXT[op] - 4 - int(pad) for n, op, pad in rows)


def declared_counts(pcap) -> dict:
    """The [expect.count] a sample capture's scenario declares."""
    return tomllib.loads(pcap.with_suffix(".toml").read_text())["expect"]["count"]


def storage_rows(pcap, table: str) -> list:
    """The rows of `stats --storage`'s table `table` (rpc_calls, smb_requests, iser_commands)."""
    done = run_ibwire("stats", "--storage", "--format", "json", pcap)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[table]


def rows_agree(ours: dict, want: dict, within_us: float) -> None:
    """Each wanted row (by key) is in `ours` with its submission, completion and bytes, and its latency
    within `within_us` microseconds (None where there is no completion)."""
    for key, w in want.items():
        got = ours[key]
        assert (got["submission"], got["completion"], got["bytes"]) == (w["submission"], w["completion"], w["bytes"]), (
            key
        )
        if w["latency_us"] is None:
            assert got["latency_us"] is None, key
        else:
            assert abs(got["latency_us"] - w["latency_us"]) < within_us, key


# Layers tshark's -T json shows that frame.protocols does not list: dissectors called as functions (SCSI
# inside iSCSI, NVMe inside NVMe-oF), reassembly summaries (`rpcordma.fragments`), expert items
UNLISTED = {"frame", "scsi", "nvme", "_ws.malformed", "_ws.expert"}


def protocol_lists(text: str) -> list:
    """Per frame of a -T json document: (its layers above infiniband, as frame.protocols would list them;
    its frame.protocols above infiniband)."""
    out = []
    for pkt in json.loads(text):
        layers = list(pkt["_source"]["layers"])
        above = layers[layers.index("infiniband") + 1 :] if "infiniband" in layers else []
        shown = pkt["_source"]["layers"]["frame"]["frame.protocols"].split(":")
        out.append(
            (
                [n for n in above if n not in UNLISTED and not n.endswith(".fragments")],
                shown[shown.index("infiniband") + 1 :] if "infiniband" in shown else [],
            )
        )
    return out


def protocols_follow(theirs_json: str, ours_json: str) -> int:
    """ibwire's frame.protocols lists, above infiniband, exactly the layers its document shows, frame by frame;
    and where both documents show the same layers it is tshark's (frames where tshark's own frame.protocols
    leaves out a layer its document shows are not compared).  Returns how many frames were compared with
    tshark."""
    theirs, ours = protocol_lists(theirs_json), protocol_lists(ours_json)
    assert len(ours) == len(theirs)
    compared = 0
    for n, ((t_layers, t_shown), (o_layers, o_shown)) in enumerate(zip(theirs, ours), 1):
        assert o_shown == o_layers, (n, o_shown, o_layers)
        if t_layers == o_layers and t_shown == t_layers:
            assert o_shown == t_shown, (n, o_shown, t_shown)
            compared += 1
    return compared
