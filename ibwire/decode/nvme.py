"""NVMe-oF over RDMA across frames: which queue pairs carry NVMe-oF (learned from the RDMA-CM REQ/REP
for service port 4420, as Wireshark's packet-nvme-rdma.c does, or declared with `decode -d nvme-rdma`),
SEND First/Middle/Last reassembled per QP, and each completion matched to its command by command id.

Feed every Decoded in capture order; frames of a known queue get the NVMe layers and fields added.  In bulk
mode (ibwire.analyze.storage) only commands are followed: no layer is built and scapy is never loaded."""

from typing import Dict, List, Optional

import numpy as np

from dissectors.nvmetable import CQE_LEN, FABRICS_OPC, IDENTIFY_OPC, SQE_LEN, is_nvme_service
from ibwire.decode.rcdata import rc_data
from ibwire.decode.records import F_MAD

ADMIN_ONLY = (0x06, 0x09, 0x0A, 0x0C, 0x18)  # Identify, Set/Get Features, AER, Keep Alive: no I/O opcode
MAX_SEND = 1 << 20
JOURNAL = (
    1 << 16
)  # frames whose additions are kept for a second feed          # a reassembled SEND larger than this is dropped (a capsule is at most a few KiB)


class Command:
    """A command seen on a queue: its capsule, the frames that moved its data, its completion."""

    __slots__ = ("frame", "time", "sqe", "qid", "cqe", "data", "bytes", "status", "cqe_time", "queue", "tr", "req")

    def __init__(self, frame: int, time: float, sqe: bytes, qid):
        self.frame, self.time, self.sqe, self.qid = frame, time, sqe, qid
        self.cqe, self.cqe_time, self.status = None, None, None
        self.data: List[int] = []
        self.bytes = 0
        self.queue = None
        self.tr = 0  # where the next data packet's bytes lie in the transfer, as Wireshark counts (its tr_bytes)
        self.req = None  # the frame of its last RDMA READ request, which every packet of the read's data names

    @property
    def keyed(self):
        """(R_Key, address, length) of its keyed SGL data block descriptor (type 4), else None."""
        if self.sqe[39] >> 4 != 4:
            return None
        return (
            int.from_bytes(self.sqe[35:39], "little"),
            int.from_bytes(self.sqe[24:32], "little"),
            int.from_bytes(self.sqe[32:35], "little"),
        )


class Queue:
    def __init__(self, qid, name: str = ""):
        self.qid, self.name = qid, name
        self.pending: Dict[int, Command] = {}
        self.keys: Dict[int, Command] = {}  # R_Key of a pending command's SGL -> the command
        self.reads: Dict[int, tuple] = {}  # PSN of an RDMA READ request -> (command, request frame)
        self.moving = None  # (command, last PSN, frames so far) of the transfer under way


def _addr(flat, side):
    return flat.get(f"ip.{side}") or flat.get(f"ipv6.{side}") or flat.get(f"grh.{'sgid' if side == 'src' else 'dgid'}")


class NvmeTracker:
    """decode_as: every RC queue pair is NVMe-oF (commands are SENDs of 64 bytes or more from the host,
    completions SENDs of 16 bytes to it), for captures without the connection setup."""

    def __init__(self, decode_as: bool = False, bulk: bool = False):
        self.decode_as = decode_as
        self.bulk = bulk  # only follow commands (ibwire.analyze.storage): no layers
        self.ends: Dict[tuple, tuple] = {}  # (address, QPN) -> (Queue, frames to it go to the host)
        self.reqs: Dict[int, tuple] = {}  # CM local communication id -> (host address, host QPN, qid)
        self.sends: Dict[tuple, bytearray] = {}
        self.pairs: Dict[tuple, Queue] = {}  # (host, target) -> Queue of declared queues
        self.commands: List[Command] = []  # every command, in capture order (the storage view reads it)
        self.active = decode_as
        self.journal: Dict[int, list] = {}  # frame number -> what feed added (replayed on a second feed)
        self.entry: list = []

    def feed(self, d) -> None:
        """Add the NVMe-oF layers to `d`; a frame fed again (a filter, then the printer, decoding it) gets what
        its first feed found, so queue state advances once per frame."""
        if self.bulk:
            self._feed(d)
            return
        if d.flat.get("_nvme.fed"):  # the printer may hand the same decode over twice
            return
        d.flat["_nvme.fed"] = True
        n = d.frame.number
        if n in self.journal:
            for layer, replace, flat, notes in self.journal[n]:
                if layer is not None:
                    _add(d, layer, replace)
                _fields(d, flat)
                d.notes.extend(notes)
            _present(d)
            return
        self.journal[n] = self.entry = []
        while len(self.journal) > JOURNAL:
            del self.journal[next(iter(self.journal))]
        before, notes = dict(d.flat), len(d.notes)
        self._feed(d)
        if self.entry or len(d.notes) > notes:
            extra = {k: v for k, v in d.flat.items() if k.startswith("nvme") and before.get(k) != v}
            self.entry.append((None, False, extra, d.notes[notes:]))
        _present(d)

    def _feed(self, d) -> None:
        flat = d.flat
        try:
            if "cm.req" in flat or "cm.rep" in flat or "cm.rej" in flat:
                self._cm(d)
            elif "bth.opcode" in flat and self.active:
                self._transport(d)
        except Exception as e:  # never let a damaged capsule stop the decode
            d.errors.append(f"malformed: NVMe-oF ({type(e).__name__})")

    def _cm(self, d):
        flat = d.flat
        if "cm.req.serviceid" in flat and is_nvme_service(flat["cm.req.serviceid"]):
            private = bytes.fromhex(flat.get("cm.req.ip_cm.private", ""))
            qid = int.from_bytes(private[2:4], "little") if len(private) >= 4 else 0
            host = flat.get("cm.req.ip_cm.sip4") or flat.get("cm.req.ip_cm.sip6") or _addr(flat, "src")
            self.reqs[flat["cm.req"]] = (host, flat["cm.req.localqpn"], qid)
            self.active = True
            if not self.bulk:
                from dissectors.nvme import cm_layer

                self._add(d, cm_layer("req", private[:32]))
        elif flat.get("cm.rep.remotecommid") in self.reqs:
            host, host_qpn, qid = self.reqs[flat["cm.rep.remotecommid"]]
            queue = Queue(qid, f"{host} QP 0x{host_qpn:06x} qid {qid}")
            self.ends[(host, host_qpn)] = (queue, True)
            self.ends[(_addr(flat, "src"), flat["cm.rep.localqpn"])] = (queue, False)
            if not self.bulk:
                from dissectors.nvme import cm_layer

                self._add(d, cm_layer("rep", bytes.fromhex(flat.get("cm.rep.private", ""))[:32]))
        elif flat.get("cm.rej.remotecommid") in self.reqs and not self.bulk:
            from dissectors.nvme import cm_layer

            self._add(d, cm_layer("rej", bytes.fromhex(flat.get("cm.rej.private", ""))[:4]))

    def _end(self, flat, to_host_guess: Optional[bool]):
        """(queue, to host) of the frame's destination QP.  Declared queues without a connection setup share
        one Queue per host and target pair (completions go to another QP than commands came from); their
        qid is unknown (None)."""
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        if key not in self.ends and self.decode_as and to_host_guess is None:  # RDMA READ/WRITE: target -> host
            to_host = not flat.get("bth.opname", "").startswith("RDMA READ Response")
            pair = (_addr(flat, "dst"), _addr(flat, "src")) if to_host else (_addr(flat, "src"), _addr(flat, "dst"))
            return (self.pairs[pair], to_host) if pair in self.pairs else None
        if key not in self.ends and self.decode_as and to_host_guess is not None:
            pair = (
                (_addr(flat, "dst"), _addr(flat, "src")) if to_host_guess else (_addr(flat, "src"), _addr(flat, "dst"))
            )
            self.ends[key] = (self.pairs.setdefault(pair, Queue(None, f"{pair[0]} → {pair[1]}")), to_host_guess)
        return self.ends.get(key)

    def _transport(self, d):
        flat = d.flat
        op = flat.get("bth.opname", "")
        if not flat["bth.opname"].startswith(("SEND", "RDMA")) or not op or not flat.get("bth.transport") == "RC":
            return
        payload = flat["_payload"] if "_payload" in flat else bytes.fromhex(flat.get("payload.data", ""))
        guess = None
        if op.startswith("SEND"):
            guess = len(payload) == CQE_LEN if "Only" in op else False
        end = self._end(flat, guess)
        if end is None:
            return
        queue, to_host = end
        if queue.qid is not None:
            _fields(d, {"nvme-rdma.cmd.qid": queue.qid})
        if not op.startswith("SEND"):
            self._data(d, queue, op, payload)
            return
        key = (_addr(flat, "dst"), flat["bth.destqp"])
        if "First" in op or "Middle" in op:
            buf = self.sends.setdefault(key, bytearray())
            if len(buf) + len(payload) <= MAX_SEND:
                buf += payload
            d.notes.append("[NVMe-oF: SEND segment, reassembled at the Last]")
            return
        if "Last" in op:
            payload = bytes(self.sends.pop(key, b"")) + payload
            d.notes.append(f"[NVMe-oF: reassembled SEND of {len(payload)} bytes]")
            _fields(d, {"nvme-rdma.reassembled.length": len(payload)})
        if to_host:
            self._completion(d, queue, payload)
        elif len(payload) >= SQE_LEN:
            qid = queue.qid if queue.qid is not None else 0 if payload[0] in ADMIN_ONLY else 1
            cid = int.from_bytes(payload[2:4], "little")
            cmd = queue.pending[cid] = Command(d.frame.number, d.frame.time, payload[:SQE_LEN], qid)
            cmd.bytes = len(payload) - SQE_LEN  # in-capsule data
            cmd.queue = queue
            if cmd.keyed:
                queue.keys[cmd.keyed[0]] = cmd
            self.commands.append(cmd)
            if self.bulk:
                return
            from dissectors.nvme import command_layer

            name, pkt = command_layer(payload, qid)
            self._add(d, pkt, replace=True)
            d.notes.append(f"NVMe{'oF' if payload[0] == FABRICS_OPC else ''} {name} cid={cid}")
        elif not self.bulk:
            from dissectors.nvme import NVMeUnknown

            self._add(d, NVMeUnknown(payload), replace=True)

    def _data(self, d, queue, op: str, payload: bytes) -> None:
        """An RDMA READ or WRITE moving a command's data: the first packet names the command's SGL by
        R_Key (RETH), the packets after it follow by PSN (packet-nvme-rdma.c matches them the same way)."""
        flat, psn = d.flat, d.flat["bth.psn"]
        cmd, extra = None, {}
        if op == "RDMA READ Request" or (op.startswith("RDMA WRITE") and ("First" in op or "Only" in op)):
            cmd = queue.keys.get(flat.get("reth.r_key"))
            if cmd is not None and op == "RDMA READ Request":
                queue.reads[psn] = (cmd, d.frame.number)
                extra["nvme-rdma.read_to_host_req"] = True
                cmd.data.append(d.frame.number)
                if not self.bulk:
                    _link(d, cmd, extra)
                return
            queue.moving = (cmd, psn, [d.frame.number]) if cmd is not None else None
        elif op.startswith("RDMA READ Response") and ("First" in op or "Only" in op):
            cmd, req = queue.reads.pop(psn, (None, None))
            if cmd is not None:
                extra["nvme.fabrics.data_req"] = cmd.req = req
                cmd.tr = 0  # packet-nvme-rdma.c counts a READ's data from 0 (a WRITE's goes on)
            queue.moving = (cmd, psn, [d.frame.number]) if cmd is not None else None
        elif queue.moving is not None and (psn - queue.moving[1]) & 0xFFFFFF == 1:
            cmd, _, frames = queue.moving
            key = "nvme-rdma.read_from_host_prev" if op.startswith("RDMA READ") else "nvme-rdma.write_to_host_prev"
            if op.startswith("RDMA READ") and cmd.req is not None:
                extra["nvme.fabrics.data_req"] = cmd.req
            extra[key] = frames[-1]
            frames.append(d.frame.number)
            queue.moving = (cmd, psn, frames)
        if cmd is None:
            return
        length = flat.get("payload.length", 0)
        cmd.data.append(d.frame.number)
        cmd.bytes += length
        if self.bulk:
            return
        if op.startswith("RDMA READ"):
            extra["nvme-rdma.read_from_host_resp"] = flat.get("payload.data", "")
        else:
            extra["nvme-rdma.write_to_host_req"] = True
        _link(d, cmd, extra)
        self._structure(d, cmd, op, payload[:length])

    def _structure(self, d, cmd, op: str, data: bytes) -> None:
        """What Wireshark 4.4 shows of a data packet of `cmd`: a data structure it decodes (Identify, log pages,
        Connect data), an `nvme` layer with nothing in it (an I/O command's data; in an RDMA WRITE also an
        Identify's of a CNS it does not decode), or the bytes alone.  Where its reading ran past the packet it stops
        (Malformed) and leaves the transfer's offset where it was."""
        from dissectors.nvme import NVMeEmpty, data_layer

        layer = data_layer(cmd.sqe, cmd.qid, cmd.tr, data)
        if layer is not None:  # a data structure Wireshark decodes (Identify, log pages, Connect data)
            self._add(d, layer, replace=True)
            if layer.cut:
                d.notes.append("[Malformed Packet: NVMe Fabrics RDMA]")
                return
        elif op.startswith("RDMA WRITE") and (cmd.qid != 0 or cmd.sqe[0] == IDENTIFY_OPC):
            self._add(d, NVMeEmpty(data), replace=KEEP)
        elif cmd.qid != 0 and cmd.sqe[0] != FABRICS_OPC:  # an I/O command's data read from the host
            self._add(d, NVMeEmpty(data), replace=KEEP)
        cmd.tr += len(data)

    def _add(self, d, layer, replace=False) -> None:
        self.entry.append((layer, replace, {}, []))
        _add(d, layer, replace)

    def _completion(self, d, queue, payload):
        cmd = queue.pending.get(int.from_bytes(payload[12:14], "little")) if len(payload) == CQE_LEN else None
        if cmd is None or cmd.cqe:
            if not self.bulk:
                from dissectors.nvme import NVMeUnknown

                self._add(d, NVMeUnknown(payload), replace=True)
            return
        cmd.cqe, cmd.cqe_time = d.frame.number, d.frame.time
        cmd.status = int.from_bytes(payload[14:16], "little") >> 1
        if self.bulk:
            return
        from dissectors.nvme import completion_layer

        self._add(d, completion_layer(payload, cmd.sqe, cmd.qid), replace=True)
        which = "nvme.fabrics" if cmd.sqe[0] == FABRICS_OPC else "nvme"
        latency = round((d.frame.time - cmd.time) * 1000, 3)
        _fields(d, {f"{which}.cmd_pkt": cmd.frame, f"{which}.cmd_latency": latency})
        status = int.from_bytes(payload[14:16], "little") >> 1
        d.notes.append(
            f"NVMe CQE cid={int.from_bytes(payload[12:14], 'little')} for frame {cmd.frame} "
            f"status=0x{status:x} {latency} ms"
        )


def _fields(d, values: dict) -> None:
    """Fields learned across frames, in the flat map and under their protocol in the nested one (-V, JSON)."""
    d.flat.update(values)
    for key, value in values.items():
        proto = "nvme-rdma" if key.startswith("nvme-rdma.") else "nvme"
        d.layers.setdefault(proto, {})[key[len(proto) + 1 :]] = value


def _link(d, cmd, extra) -> None:
    """Say which command a data frame belongs to (Wireshark names the link nvme.fabrics.cmd_pkt for all)."""
    _fields(d, {"nvme.fabrics.cmd_pkt": cmd.frame, **extra})
    d.notes.append(f"[NVMe-oF data for the command in frame {cmd.frame}]")


KEEP = "packet"  # _add's replace: the layer stands for the payload in the packet, the payload fields stay


def _add(d, layer, replace=False) -> None:
    """Put `layer` in the packet (instead of the payload bytes when `replace`; with KEEP its payload fields stay
    in d's maps) and its fields in d's maps."""
    from ibwire.decode.fields import layer_fields, nest_and_flatten

    if getattr(layer, "cut", False):
        d.flat["_ws.malformed"] = True
        d.errors.append("malformed: NVMe log page read past the packet, as Wireshark 4.4 reads it")
    if d.packet is not None:
        if replace:
            from scapy.packet import Raw

            raw = d.packet.getlayer(Raw)
            if raw is not None and raw.underlayer is not None:
                under, tail = raw.underlayer, raw.payload
                under.remove_payload()
                layer = layer.copy()
                if tail:
                    layer.add_payload(tail)
                under.add_payload(layer)
    nested, flat = nest_and_flatten(layer_fields(layer))
    trailer = {k: d.layers.pop(k) for k in list(d.layers) if k in ("pad", "icrc", "vcrc")}
    for key, fields in nested.items():
        d.layers.setdefault(key, {}).update(fields)
    d.layers.update(trailer)  # the CRCs stay last, as on the wire
    for key, value in flat.items():
        if key.split(".")[0] in PROTOCOLS and key not in PROTOCOLS:  # a protocol's presence: _present's
            d.flat[key] = value
    if replace and replace != KEEP:
        for key in ("payload", "payload.data", "payload.length"):
            d.flat.pop(key, None)
        d.layers.pop("payload", None)


PROTOCOLS = ("nvme-rdma", "nvme")


def layer_kind(layer, flat) -> str:
    """What the NVMe layer `layer` (dissectors.nvme) of a frame is to tshark 4.4: "connect data" or "data" (a
    structure a transfer carries), "empty" (the data of a command it opens a bare nvme layer on), "cm" (RDMA-CM
    private data), "fabrics" (a fabrics capsule or its completion), "capsule" (an admin or I/O one), or the
    protocol of the bytes alone (NVMeData's nvme, NVMeUnknown's nvme-rdma)."""
    rows = getattr(layer, "rows", ())
    if getattr(layer, "at", None) is not None:
        return "connect data" if rows[0].key.startswith("nvme.fabrics.cmd.connect.data.") else "data"
    if getattr(layer, "empty", False):
        return "empty"
    if not rows:
        return layer.ws_name
    if rows[0].key.startswith("nvme-rdma.cm"):
        return "cm"
    fabrics = any(r.key.startswith("nvme.fabrics") for r in rows) or "nvme.fabrics.cmd_pkt" in flat
    return "fabrics" if fabrics else "capsule"


def linked(flat) -> bool:
    """Whether tshark 4.4 shows an nvme-rdma layer of the frame's queue: RDMA-CM private data or the queue id."""
    return "nvme-rdma.cmd.qid" in flat or any(k.startswith("nvme-rdma.cm.") for k in flat)


ALONE = {"capsule": ["nvme-rdma", "nvme"], "nvme": ["nvme"], "nvme-rdma": ["nvme-rdma"], "cm": ["nvme-rdma"]}
ALONE["fabrics"] = ALONE["cm"]  # nvme.fabrics.* inside nvme-rdma


def layer_protocols(layer, flat) -> list:
    """The protocol layers tshark 4.4 opens for the NVMe layer `layer`, in order: the rule both the -T json / -V
    document (ibwire.report.packets.nvme_doc) and a filter's bare `nvme` / `nvme-rdma` follow."""
    kind = layer_kind(layer, flat)
    if kind in ALONE:
        return ALONE[kind]
    queue = ["nvme-rdma"] if linked(flat) else []  # a transfer's links, in its queue's layer
    return queue if kind == "connect data" else queue + ["nvme"]


def _present(d) -> None:
    """`nvme` and `nvme-rdma` present in d.flat where the frame's document shows them, and `nvme-rdma` (not the
    payload's `data`) last in frame.protocols where tshark's nvme-rdma takes the payload (nvme is never listed
    there: packet-nvme-rdma.c calls it directly)."""
    names, layer = [], d.packet
    while layer is not None and type(layer).__name__ != "NoPayload":
        if type(layer).__module__ == "dissectors.nvme":
            names += layer_protocols(layer, d.flat)
        layer = layer.payload
    names = names or (["nvme-rdma"] if linked(d.flat) else [])
    for proto in PROTOCOLS:
        if proto in names:
            d.flat[proto] = True
        else:
            d.flat.pop(proto, None)
    if names:
        from ibwire.decode.frame import upper_protocols

        upper_protocols(d.flat, ["nvme-rdma"])


CM_CLASS = 0x07


def storage_rows(rec, rows, tracker) -> list:
    """Which of `rows` the NVMe-oF tracker must see in full, as two arrays to feed it one after the other:
    the RDMA-CM MADs, then (when they or earlier frames made an NVMe-oF queue known, or queues are declared)
    every RC SEND and RDMA READ/WRITE.  Other RDMA-CM traffic costs no full decode of its data packets."""
    cm = ((rec["flags"][rows] & F_MAD) > 0) & (rec["mad_class"][rows] == CM_CLASS)
    data = rc_data(rec, rows)
    return [np.flatnonzero(cm), lambda: np.flatnonzero(data) if tracker.active else np.zeros(0, np.int64)]
