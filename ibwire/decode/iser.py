"""iSER across frames: which RC SENDs carry iSER (as Wireshark 4.4's packet-iser.c: queue pairs connected
by an RDMA-CM REQ for TCP port 3260, RFC 7145 §5.1, or every RC SEND with `decode -d iser`), SEND
First/Middle/Last reassembled per QP, each SCSI Response matched to its SCSI Command by Initiator Task Tag
(RFC 7143 §11.4), and the RDMA WRITEs to a command's read STag and RDMA READs of its write STag (RFC 7145
§7.3) counted as its data.

Feed every Decoded in capture order; iSER frames get the iser/iscsi/scsi layers and fields.  In bulk mode
(ibwire.analyze.storage) only commands are followed: no layer is built, scapy is never loaded."""

from typing import Dict, List

import numpy as np

from dissectors import iscsitable as T
from dissectors.rpcrdmatable import leaves
from ibwire.decode.rcdata import rc_data
from ibwire.decode.rpcrdma import JOURNAL, MAX_SEND, RC_SEND, _addr, _cut, flat_op, splice

LAYERS = ("iser", "iscsi", "scsi", "scsi_sbc")


class Command:
    """A SCSI command seen in an iSCSI SCSI Command PDU: frame, CDB, STags, its data and its response."""

    __slots__ = ("frame", "time", "itt", "cdb", "lun", "length", "stags", "data", "bytes", "done", "done_time")
    __slots__ += ("status", "response", "initiator", "target")

    def __init__(self, frame, time, info, stags, initiator, target):
        self.frame, self.time, self.itt, self.cdb = frame, time, info["itt"], info["cdb"]
        self.lun, self.length, self.stags = T.lun_of(info), info["length"], stags
        self.data, self.bytes, self.done, self.done_time = [], 0, None, None
        self.status, self.response, self.initiator, self.target = None, None, initiator, target


class IserTracker:
    """decode_as: every RC SEND that looks like iSER is iSER (tshark's `-d infiniband,iser`)."""

    def __init__(self, decode_as: bool = False, bulk: bool = False):
        self.decode_as, self.bulk = decode_as, bulk
        self.reqs: Dict[int, tuple] = {}
        self.conns: Dict[tuple, int] = {}  # (address, QPN) of an end RDMA-CM connected for iSER -> connection
        self.sends: Dict[tuple, tuple] = {}  # (address, QPN) -> (bytes, frames) of a SEND under way
        self.commands: List[Command] = []
        self.pending: Dict[tuple, Command] = {}  # (connection, ITT) -> command awaiting its response
        self.stags: Dict[int, Command] = {}  # read or write STag (R_Key) -> command
        self.reads: Dict[int, Command] = {}  # PSN of an RDMA READ request -> command
        self.moving: Dict[tuple, Command] = {}  # (address, QPN) receiving a command's data -> command
        self.seen = decode_as
        self.journal: Dict[int, list] = {}

    def feed(self, d) -> None:
        """Add the layers to `d`; a frame fed again (a second pass) gets what its first feed found."""
        if self.bulk:
            self._feed(d, [])
        elif not d.flat.get("_iser.fed"):
            d.flat["_iser.fed"] = True
            found = self.journal.get(d.frame.number)
            if found is None:
                found = self.journal[d.frame.number] = []
                if len(self.journal) > JOURNAL:
                    self.journal.pop(next(iter(self.journal)))
                self._feed(d, found)
            else:
                for record in found:
                    _apply(d, *record)

    def _feed(self, d, entry) -> None:
        """Route a frame: RDMA-CM exchanges, then (once iSER was seen) RC SENDs and RDMA data packets."""
        rc = d.flat.get("bth.transport") == "RC" and self.seen
        try:
            if "cm.req" in d.flat or "cm.rep" in d.flat:
                self._cm(d.flat)
            elif rc and d.flat.get("bth.opcode", 255) in RC_SEND:
                self._send(d, entry)
            elif rc:
                self._data(d, entry)
        except Exception as e:  # never let a damaged message stop the decode
            d.errors.append(f"malformed: iSER ({type(e).__name__})")

    def _cm(self, flat) -> None:
        if "cm.req.serviceid" in flat and T.is_iser_service(flat["cm.req.serviceid"]):
            self.reqs[flat["cm.req"]] = (_addr(flat, "src"), flat["cm.req.localqpn"])
        elif flat.get("cm.rep.remotecommid") in self.reqs:
            n = len(self.conns)
            self.conns[self.reqs.pop(flat["cm.rep.remotecommid"])] = n
            self.conns[(_addr(flat, "src"), flat["cm.rep.localqpn"])] = n
            self.seen = True

    def _send(self, d, entry) -> None:
        flat, op = d.flat, flat_op(d.flat)
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        if not (self.decode_as or key in self.conns):
            return
        payload = flat["_payload"] if "_payload" in flat else bytes.fromhex(flat.get("payload.data", ""))
        got = _gather(self.sends, key, op, payload, d.frame.number)
        if got is None:
            return
        whole, frames = got
        if not T.is_iser(whole):
            return
        layers, notes, extra = self._message(d, whole, key)
        if len(frames) > 1:
            notes.append(f"[iSER message reassembled from frames {', '.join(map(str, frames))}]")
        self._record(d, entry, (layers, notes, extra))

    def _record(self, d, entry, record) -> None:
        if not self.bulk:
            entry.append(record)
            _apply(d, *record)

    def _message(self, d, data: bytes, key):
        """([(layer, bytes, tree)], notes, extra fields) of one iSER message; commands are followed."""
        tree, info = T.iser_header(data)
        layers = [("ISER", data[: T.ISER_HEADER], tree)]
        if info["opcode"] != T.CONTROL:
            return layers, ["iSER Hello" if info["opcode"] == T.HELLO else "iSER HelloRply"], {}
        pdu = data[T.ISER_HEADER :]
        itree, pinfo = T.iscsi_pdu(pdu)
        op = pinfo.get("opcode")
        conn = self.conns.get(key, frozenset((_addr(d.flat, "src"), _addr(d.flat, "dst"))))
        cmd = self.pending.get((conn, pinfo.get("itt")))
        scsi, more = [], []
        if op == T.SCSI_CMD:
            cmd = self._command(d, pinfo, info, conn)
            cmd.bytes += len(pinfo["data"])  # immediate data (RFC 7143 §11.3.7)
            head = [("scsi.lun", cmd.lun), ("scsi.inquiry.devtype", 0)]
            scsi = head + T.cdb_items(cmd.cdb)
            if pinfo["data"]:  # tshark shows the immediate data's SCSI layer after the CDB's
                more = head + [("scsi_sbc.opcode", cmd.cdb[0]), ("scsi.request_frame", cmd.frame)]
        elif op in (T.DATA_OUT, T.DATA_IN) and cmd is not None:
            itree.append(("iscsi.request_frame", cmd.frame))
            scsi = [("scsi.lun", cmd.lun), ("scsi.inquiry.devtype", 0), ("scsi_sbc.opcode", cmd.cdb[0])]
            data = pinfo["data"]
            cmd.data.append(d.frame.number)
            cmd.bytes += len(data)
            scsi += [("scsi.request_frame", cmd.frame), ("data", [("data.data", data), ("data.len", len(data))])]
            if pinfo.get("status") is not None:
                self._completed(d, cmd, conn, pinfo["status"], 0)
        elif op == T.SCSI_RSP:
            sense = T.sense_items(pinfo["data"])
            if cmd is not None:
                self._completed(d, cmd, conn, pinfo["status"], pdu[2])
                took = [("scsi.request_frame", cmd.frame), ("scsi.time", round(d.frame.time - cmd.time, 9))]
                at = next((i for i, (k, _) in enumerate(itree) if k == "iscsi.flags"), len(itree))
                itree[at:at] = [("iscsi.request_frame", cmd.frame), ("iscsi.time", took[1][1])]  # as tshark places them
                if pinfo["status"] == T.CHECK_CONDITION:  # its sense data, else the command's SCSI layer
                    scsi = [("scsi.lun", cmd.lun)] + sense + took
                else:
                    scsi = [("scsi.lun", cmd.lun), ("scsi.inquiry.devtype", 0), ("scsi_sbc.opcode", cmd.cdb[0])]
                    scsi += took + [("scsi.status", pinfo["status"])]
            elif sense:
                scsi = [("scsi.lun", 0xFFFF)] + sense
        layers.append(("ISCSI", pdu, itree))
        for tree in (scsi, more):
            layers += [("SCSI", b"", tree), ("SBC", b"", tree)] if tree else []
        note = T.info_text(op, {**pinfo, "length": cmd.length if cmd else 0}, cmd.cdb if op == T.SCSI_CMD else None)
        cut = _cut(itree)
        return layers, [note] + (["[Malformed Packet: iSCSI]"] if cut else []), {"_ws.malformed": True} if cut else {}

    def _command(self, d, pinfo, info, conn) -> Command:
        stags = [s for s, _ in (info["write"], info["read"]) if s]
        initiator, target = _addr(d.flat, "src"), _addr(d.flat, "dst")
        cmd = Command(d.frame.number, d.frame.time, pinfo, stags, initiator, target)
        self.commands.append(cmd)
        self.pending[(conn, cmd.itt)] = cmd
        self.stags.update(dict.fromkeys(stags, cmd))
        return cmd

    def _completed(self, d, cmd: Command, conn, status: int, response: int) -> None:
        cmd.done, cmd.done_time, cmd.status, cmd.response = d.frame.number, d.frame.time, status, response
        self.pending.pop((conn, cmd.itt), None)
        for s in cmd.stags:
            if self.stags.get(s) is cmd:
                del self.stags[s]

    def _data(self, d, entry) -> None:
        """RDMA WRITE and READ packets moving a command's data: the first names its STag (RETH R_Key), the
        others follow on their queue pair."""
        flat, op = d.flat, d.flat.get("bth.opname", "")
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        if op == "RDMA READ Request":
            cmd = self.stags.get(flat.get("reth.r_key"))
            if cmd is not None:
                self.reads[flat["bth.psn"]] = cmd
            return
        if op.startswith("RDMA WRITE") and ("First" in op or "Only" in op):
            self.moving[key] = self.stags.get(flat.get("reth.r_key"))
        elif op.startswith("RDMA READ Response") and ("First" in op or "Only" in op):
            self.moving[key] = self.reads.pop(flat["bth.psn"], None)
        cmd = self.moving.get(key) if op.startswith("RDMA") else None
        if cmd is None:
            return
        cmd.bytes += flat.get("payload.length", 0)
        cmd.data.append(d.frame.number)
        self._record(
            d, entry, ([], [f"[iSER data of the SCSI command in frame {cmd.frame}]"], {"iscsi.data_call": cmd.frame})
        )


def _gather(sends: dict, key, op: str, payload: bytes, frame: int):
    """(message, its frames) once the last packet of a SEND arrived on queue pair `key`; None while more are
    due (IBA §9.8.3: First, Middle … Last, at most MAX_SEND bytes kept)."""
    if op == "Only":
        return payload, []
    if op == "First":
        sends[key] = (bytearray(), [])
    held = sends.get(key)
    if held is not None and len(held[0]) + len(payload) <= MAX_SEND:
        held[0].extend(payload)
        held[1].append(frame)
    if op != "Last":
        return None
    held = sends.pop(key, None)
    return (bytes(held[0]), held[1]) if held else (payload, [])


def _apply(d, layers, notes: list, extra: dict) -> None:
    """What the tracker found of a frame: layers (replacing its payload), fields, summary notes."""
    if layers:
        _attach(d, layers)
    d.flat.update(extra)
    d.notes.extend(notes)
    if "_ws.malformed" in extra:
        d.errors.append("malformed: iSCSI PDU cut short")


def _attach(d, layers) -> None:
    """Put the layers (instead of the payload bytes) in d's packet, their fields in d's maps."""
    from dissectors import iser
    from ibwire.decode.fields import layer_fields, nest_and_flatten
    from ibwire.decode.frame import upper_protocols

    chain = None
    for cls, data, tree in layers:
        layer = iser.made(getattr(iser, cls), data, tree)
        chain = layer if chain is None else chain / layer
    splice(d, chain)
    entries = layer_fields(chain)
    nested, flat = nest_and_flatten(entries)
    names = [key for key, _, _ in entries if key in ("iser", "iscsi")]
    upper_protocols(d.flat, names)
    crcs = {k: d.layers.pop(k) for k in list(d.layers) if k in ("pad", "icrc", "vcrc")}
    d.layers.update({k: v for k, v in nested.items() if k in LAYERS})
    d.layers.update(crcs)
    d.flat.update({k: v for k, v in flat.items() if k in LAYERS})
    # every field in tree order, a repeated one as the list of its values (the LUN of an iSCSI header is
    # scsi.lun as in tshark's SCSI layer)
    trees = [tree for cls, _, tree in layers if cls != "SBC"]
    d.flat.update(
        {k: v for k, v in leaves([(str(i), t) for i, t in enumerate(trees)]).items() if k.split(".")[0] in LAYERS}
    )
    for key in ("payload", "payload.data", "payload.length"):
        d.flat.pop(key, None)
    d.layers.pop("payload", None)


def storage_rows(batch, rows, trackers) -> list:
    """Which of `rows` the iSER tracker must see in full, in capture order, asked once the RDMA-CM rows
    were fed: none until a queue pair was connected for iSER (or -d declared it), then every RC SEND, RDMA
    READ and WRITE."""
    tracker = getattr(trackers, "iser", None)
    if tracker is None:
        return []

    def data():
        if not tracker.seen:
            return np.zeros(0, np.int64)
        return np.flatnonzero(rc_data(batch.rec, rows))

    return [data]
