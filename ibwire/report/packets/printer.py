"""`ibwire decode`'s output, batch by batch: every selected record the compiled decoder fully understands
is printed by a line program shared by its group (ibwire.report.packets.program); the others are decoded in full
and printed from their fields, in the same layout.
"""

import os
import time
from typing import List, Optional

import numpy as np

from dissectors.numbers import LINKTYPE_ERF
from ibwire.analyze.hashing import group_rows
from ibwire.decode import records as R
from ibwire.decode.iser import storage_rows as iser_rows
from ibwire.decode.nvme import storage_rows
from ibwire.decode.rpcrdma import storage_rows as rpcrdma_rows
from ibwire.decode.smbdirect import storage_rows as smbdirect_rows
from ibwire.decode.storagepick import storage_possible
from ibwire.decode.stream import Batch
from ibwire.report.escape import printable
from ibwire.report.packets import summary
from ibwire.report.packets.program import AUX, compile_parts, render, render_halves
from ibwire.report.packets.session import Session

FORMATS = ("text", "fields", "json", "jsonl", "ek", "csv")
TIME_MODES = ("r", "a", "ad", "d", "dd", "e", "u", "ud")
RMPP_CLASS = 0x03  # SubnAdm: the class whose tables come in several segments
# The link kinds whose records hold what a line shows (record_filter.DATA, whose import -- the display filters'
# field types -- summary lines and -T fields of record fields do without: 7 ms of their start), as a table
RECORDED = np.zeros(256, bool)
RECORDED[list(summary.PROTOCOL)] = True


def _shape_key(rec: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A number per row naming everything that decides which headers and fields a record shows (`rows`
    ascending, so all of them are the records themselves, read a column at a time without copies)."""
    r = rec if len(rows) == len(rec) else R.Rows(rec, rows)
    k = r["link"].astype(np.uint64)
    for col, bits in (("flags", 8), ("opcode", 8), ("icrc", 4), ("vcrc", 4), ("mad_class", 8)):
        k = (k << np.uint64(bits)) | r[col].astype(np.uint64)
    k = (k << np.uint64(16)) | r["linktype"].astype(np.uint64)
    k = (k << np.uint64(1)) | (r["vlan"] >= 0).astype(np.uint64)
    k = (k << np.uint64(1)) | (r["caplen"] >= 14).astype(np.uint64)
    k = (k << np.uint64(1)) | (r["paylen"] > 0).astype(np.uint64)
    out = np.zeros(len(r), [("k", "u8"), ("analysis", "u2")])  # and which RC analysis fields it carries
    out["k"] = k
    for bit, col in enumerate(R.ANALYSIS):
        out["analysis"] |= R.analysis_present(r, col).astype(np.uint16) << np.uint16(bit)
    return out


class Printer:
    """Text of the selected rows of each batch in one output format."""

    def __init__(
        self,
        fmt: str,
        time_mode: str = "r",
        fields: Optional[List[str]] = None,
        header: bool = False,
        separator: str = "\t",
        quote: str = "",
        keys: Optional[List[str]] = None,
        protocols: Optional[List[str]] = None,
        protocol_children: bool = False,
    ):
        self.fmt, self.time_mode = fmt, time_mode
        self.protocols, self.protocol_children = protocols, protocol_children  # -j / -J
        self.session = None  # tshark's numbering across frames (-T json/ek)
        self.keys = keys or []
        self.fields = fields or []
        self.sep, self.quote = separator, quote
        # CSV without -E quote: a value holding the separator, a quote or a line break is quoted (RFC 4180)
        self.minimal = fmt == "csv" and not quote
        self.cache = {}
        self.decimals = None
        self.t0 = None  # ns of the capture's first frame
        self.prev = None  # ns of the last frame seen (captured)
        self.prev_shown = None  # ns of the last frame printed
        self.started = False
        # jsonl is the whole decode of each frame (every field -V shows), which records do not hold
        self.records_answer = fmt != "jsonl"
        self.time_base = None
        if fmt in ("fields", "csv"):
            from ibwire.decode.record_filter import NotBatchable
            from ibwire.report.packets import formats

            self.time_base = formats.time_base_of(self.keys)
        if fmt in ("fields", "csv") and self.keys:
            probe = np.zeros(1, R.RECORD)
            try:
                for k in self.keys:
                    try:
                        formats.leaf_parts(k, probe, self.time_base)
                    except formats.Unsure:
                        pass
            except NotBatchable:
                self.records_answer = False
        self.header = header
        self.rmpp = None
        self.nvme = None  # ibwire.decode.nvme.NvmeTracker: NVMe-oF queues across frames
        self.echo = None  # summary.EchoPairs of text output
        self.shapes = None  # ibwire.report.packets.shapes.Shapes: -T json and jsonl programs learned per shape
        self.renderer = None  # the thread rendering half of each batch of learned documents (render_halves)
        self.tree_dumps = False  # -V without -x: learned programs print each payload's hex dump themselves
        self._comma, self._nul = compile_parts([",\n"]), compile_parts(["\0"])

    def start(self) -> bytes:
        if self.fmt == "json":
            return b"["
        if self.header and self.fmt in ("fields", "csv"):
            return (self.sep.join(self.fields) + "\n").encode()  # tshark quotes values, not names
        return b""

    def end(self) -> bytes:
        return b"\n]\n" if self.fmt == "json" and self.started else b"]\n" if self.fmt == "json" else b""

    def keep_learned(self) -> None:
        """Keep the programs this run learned for the next runs (ibwire.report.packets.learned_store)."""
        if self.shapes is not None:
            self.shapes.store.save()

    def _time_part(self):
        return summary.time_part(self.time_mode, self.decimals)

    def _bases(self, rec, rows):
        """Per printed row, the nanoseconds its time formats subtract (None: print absolute times)."""
        t = rec["time_ns"]
        if self.fmt in ("fields", "csv"):
            mode = {"frame.time_relative": "r", "frame.time_delta": "d"}.get(self.time_base)
        else:
            mode = None if self.fmt == "jsonl" else self.time_mode
        if mode == "r":
            return np.full(len(rows), self.t0, np.int64)
        if mode == "d":
            prev = np.concatenate([[self.prev if self.prev is not None else t[0]], t[:-1]])
            return prev[rows]
        if mode == "dd":
            shown = t[rows]
            first = self.prev_shown if self.prev_shown is not None else (shown[0] if len(shown) else 0)
            return np.concatenate([[first], shown[:-1]]).astype(np.int64)
        return None

    def batch(self, batch: Batch, rows: np.ndarray, details=None) -> bytes:
        """The text of `rows` of the batch; `details(i)` gives row i's full decode (Decoded)."""
        rec = batch.rec
        if not len(rec):
            return b""
        self._begin(batch)
        if self.fmt in ("json", "ek") and self._shaped():
            return b"".join(self._shaped_documents(batch, rows, details))
        if self.fmt == "jsonl" and self._shaped():
            return self._shaped_lines(batch, rows, details)
        if self.fmt in ("json", "ek", "tree"):
            return self._documents(batch, rows, details)
        base = self._bases(rec, rows)
        every = len(rows) == len(rec)  # (`rows` ascending: all of them, read a column at a time without copies)
        flags = rec["flags"] if every else rec["flags"][rows]
        link = rec["link"] if every else rec["link"][rows]
        data = RECORDED[link] if self.records_answer else np.zeros(len(rows), bool)
        mad = np.flatnonzero(flags & R.F_MAD)
        data[mad[rec["mad_class"][rows[mad]] == RMPP_CLASS]] = False  # SA transfers span frames (RMPP): reassembled
        if self.fmt == "text":  # IPoIB: summarised by what it carries, from the full decode
            data &= (flags & R.F_IPOIB) == 0
        decoded = {}
        for k, d in self._storage_decodes(batch, rows, details):
            decoded[int(rows[k])] = d
            if data[k] and (d.notes or any(key.startswith(("nvme", "rpcordma", "smb_direct")) for key in d.flat)):
                data[k] = False  # shown from the full decode; the others as the records show them
        prog_of = np.zeros(len(rows), np.int32)
        programs = []
        idx = np.flatnonzero(data)
        if len(idx):
            sub = rows[idx]
            if self.fmt == "text":
                hashes, first, inv = group_rows(rec.view(summary.GROUP_VIEW), summary.GROUP_VIEW.names, sub)
                keys = hashes
            else:
                shape = _shape_key(rec, sub)  # grouped compiled: np.unique sorted the pairs, 5 ms a batch
                _, first, inv = group_rows(shape, ("k", "analysis"))
                keys = shape[first]
            local = []
            for g, key in enumerate(keys.tolist()):
                prog = self.cache.get(key)
                if prog is None:
                    prog = self.cache[key] = self._program(rec[sub[first[g]] : sub[first[g]] + 1])
                local.append(prog)
            unsure = [g for g, p in enumerate(local) if p is None]
            for p in local:
                programs.append(p if p is not None else b"")
            prog_of[idx] = inv.ravel()
            if unsure:
                data[idx[np.isin(inv.ravel(), unsure)]] = False
        t = rec["time_ns"]
        hidden = self._hidden_tcp_icmp(rec, rows)
        for k in np.flatnonzero(~data):
            i = int(rows[k])
            hidden = self._feed_hidden(batch, hidden, i)
            prev_ns = int(t[i - 1]) if i else (self.prev if self.prev is not None else int(t[i]))
            prog_of[k] = len(programs)
            programs.append(self._detail_program(decoded.get(i) or details(i), rec[i], prev_ns))
        self._feed_hidden(batch, hidden, len(rec))
        text = render(rec, rows, prog_of, programs, base)
        if len(rows):
            self.prev_shown = int(rec["time_ns"][rows[-1]])
        self.prev = int(rec["time_ns"][-1])
        return text

    def _hidden_tcp_icmp(self, rec, rows, whole: bool = False) -> List[int]:
        """Whole documents, or -e of a tcp or icmp field: the records of frames the filter hides that may hold
        TCP or ICMP (not InfiniBand transport, or IPoIB), whose tshark state (tcp.stream, relative numbers,
        icmp.resp_to) they still advance."""
        if len(rows) == len(rec) or not (whole or any(k.split(".")[0] in ("tcp", "icmp") for k in self.keys)):
            return []
        maybe = ((rec["flags"] & R.F_BTH) == 0) | ((rec["flags"] & R.F_IPOIB) != 0)
        maybe[rows] = False
        return np.flatnonzero(maybe)[::-1].tolist()  # (last first: taken from the end)

    def _feed_hidden(self, batch, hidden: List[int], upto: int) -> List[int]:
        """The tshark documents of the hidden frames before record `upto`, for their state only; the rest."""
        t = batch.rec["time_ns"]
        while hidden and hidden[-1] < upto:
            i = hidden.pop()
            d = _decode(batch.frame(i), None)
            if "tcp" in d.layers or "icmp" in d.layers:
                self._document_values(d, int(t[i]), int(t[i - 1]) if i else (self.prev or int(t[i])))
        return hidden

    def trees(self, batch: Batch, rows: np.ndarray, details) -> List[bytes]:
        """-V: the tree of each row (a Printer of format "tree")."""
        if self.t0 is None and len(batch.rec):
            self.t0 = int(batch.rec["time_ns"][0])
        if self._shaped():
            return b"".join(self._shaped_documents(batch, rows, details, cut=True)).split(b"\0")[:-1]
        return [t.encode() for t in self._document_texts(batch, rows, details)]

    def _begin(self, batch: Batch) -> None:
        if self.t0 is None:
            self.t0 = int(batch.rec["time_ns"][0])
            self.decimals = getattr(batch, "decimals", None) or self.decimals or 6

    def batch_parts(self, batch: Batch, rows: np.ndarray, details=None) -> List[bytes]:
        """batch()'s text as parts to write one after the other (-T json and ek render in halves at once)."""
        if self.fmt not in ("json", "ek") or not len(batch.rec) or not self._shaped():
            return [self.batch(batch, rows, details)]
        self._begin(batch)
        return self._shaped_documents(batch, rows, details)

    def tree_text(self, batch: Batch, rows: np.ndarray, details) -> List[bytes]:
        """-V alone: the trees of the rows, one after the other, in parts to write one after the other."""
        if self.t0 is None and len(batch.rec):
            self.t0 = int(batch.rec["time_ns"][0])
        if self._shaped():
            return self._shaped_documents(batch, rows, details)
        return [self._documents(batch, rows, details)]

    def _shaped(self) -> bool:
        """Do this format's documents print from learned programs (ibwire.report.packets.shapes)?"""
        if self.fmt not in ("json", "jsonl", "tree", "ek") or self.keys or self.protocols:
            return False
        if self.shapes is None:
            from ibwire.report.packets.shapes import Shapes

            self.shapes = Shapes(self.fmt, _decode)
        return True

    def _storage_decodes(self, batch, rows, details) -> list:
        """(k, full decode of rows[k]) of every frame the storage trackers must see, in the order they see
        them: capsules span frames and queues are learned from RDMA-CM first."""
        out, decoded = [], {}
        if self.nvme is None or not storage_possible(batch, rows, self.nvme):
            return out
        more = rpcrdma_rows(batch, rows, self.nvme) + smbdirect_rows(batch, rows, self.nvme)
        for phase in storage_rows(batch.rec, rows, self.nvme) + iser_rows(batch, rows, self.nvme) + more:
            for k in (phase if isinstance(phase, np.ndarray) else phase()).tolist():
                i = int(rows[k])
                d = decoded[i] = decoded.get(i) or details(i)
                self._feed_rmpp(d)
                out.append((k, d))
        return out

    def _shaped_documents(self, batch, rows, details, cut: bool = False) -> List[bytes]:
        """-T json and ek: frames of a learned shape print from its program, the others from their full decode; both
        in one compiled call (two at once, program.render_halves), in frame order, with tshark's numbering across
        frames (udp.stream); -V trees end in a NUL when they are to be `cut` apart."""
        rec, t = batch.rec, batch.rec["time_ns"]
        self.session = self.session or Session()
        progs = []
        prog_of = self.shapes.assign(batch, rows, progs)
        decoded = {}
        for k, d in self._storage_decodes(batch, rows, details):
            prog_of[k], decoded[int(rows[k])] = -1, d
        tree, comma = self.fmt == "tree", self.fmt == "json"
        if not self.started and comma:
            prog_of[:1] = -1  # the first document has no comma before it
        progs = [(p + self._nul if cut else p) if tree else self._comma + p if comma else p for p in progs]
        aux = self._aux(batch, rows)
        streams = np.zeros((len(rows), 3), np.int64)
        k_of = np.full(len(rec), -1, np.int64)
        k_of[rows] = np.arange(len(rows))
        lo = 0
        hidden = self._hidden_tcp_icmp(rec, rows, True)
        full = np.flatnonzero(prog_of < 0).tolist()
        if full:
            from ibwire.report.packets import tshark_doc as td  # (scapy's import: frames of learned shapes do without)
        for k in full:  # the numbering runs up to each full decode, which adds its own
            i = int(rows[k])
            hidden = self._feed_hidden(batch, hidden, i)
            self._number(batch, lo, i, k_of, streams, aux)
            if k:
                self.prev_shown = int(t[rows[k - 1]])
            ns = int(t[i])
            prev = int(t[i - 1]) if i else (self.prev if self.prev is not None else ns)
            d = decoded.get(i)
            text = self._document_text(td, d or details(i), ns, prev, fed=d is not None, tree=tree)
            text = text if cut or not tree else text[:-1]
            prog_of[k] = len(progs)
            progs.append(compile_parts([text], AUX))
            lo = i + 1
        self._number(batch, lo, len(rec), k_of, streams, aux)
        self._feed_hidden(batch, hidden, len(rec))
        if len(rows):
            self.prev_shown = int(t[rows[-1]])
        shown_ns = t[rows]
        aux["stream"], aux["stream_relative"], aux["stream_delta"] = (
            streams[:, 0],
            shown_ns - streams[:, 1],
            shown_ns - streams[:, 2],
        )
        self.prev = int(t[-1])
        start = batch.pos.data[rows].astype(np.int64)
        length = batch.pos.caplen[rows].astype(np.int64)
        frames = (batch.buf, start, length)
        if self.renderer is None and len(os.sched_getaffinity(0)) > 1:
            from concurrent.futures import ThreadPoolExecutor

            self.renderer = ThreadPoolExecutor(1, thread_name_prefix="ibwire-render")
        return render_halves(aux, prog_of.astype(np.int32), progs, frames, tree and self.tree_dumps, self.renderer)

    def _number(self, batch, lo: int, hi: int, k_of: np.ndarray, streams: np.ndarray, aux: np.ndarray) -> None:
        """tshark's numbering across frames for records lo..hi-1 of the batch, none decoded in full: every
        RoCEv2 frame counts in its UDP conversation (shown or not), each shown one's udp.stream and times
        go to `streams` and its ERF port's interface id to `aux` (by k_of: record -> printed row or -1)."""
        rec = batch.rec[lo:hi]
        k = k_of[lo:hi]
        roce2 = np.flatnonzero(np.isin(rec["link"], (R.ROCE2V4, R.ROCE2V6)))
        if len(roce2):
            r = R.Rows(rec, roce2)  # (indexing whole records copies each of their fields: 1.7 ms a batch)
            address = [r[c].view(np.uint8).reshape(len(r), 16) for c in ("src", "dst")]
            got = self.session.note_many(address[0], r["udp_src"], address[1], r["udp_dst"], r["time_ns"])
            shown = k[roce2] >= 0
            streams[k[roce2][shown]] = got[shown]
        erf = np.flatnonzero((rec["linktype"] == LINKTYPE_ERF) & (k >= 0))
        if len(erf):
            ports = batch.buf[batch.pos.data[lo + erf].astype(np.int64) + 9] & 3
            aux["interface"][k[erf]] = self.session.interface_ids(ports)

    def _aux(self, batch, rows) -> np.ndarray:
        """The numbers learned programs print of each row besides its bytes (ibwire.report.packets.program.AUX)."""
        rec, t = batch.rec, batch.rec["time_ns"]
        aux = np.zeros(len(rows), AUX)
        first = self.prev if self.prev is not None else int(t[0])
        shown = t[rows]
        aux["frame"], aux["epoch"], aux["relative"] = rec["frame"][rows], shown, shown - self.t0
        aux["epoch_ms"] = shown // 10**6
        aux["delta"] = shown - np.concatenate([[first], t[:-1]])[rows]
        last = self.prev_shown if self.prev_shown is not None else (int(shown[0]) if len(rows) else 0)
        aux["delta_displayed"] = shown - np.concatenate([[last], shown[:-1]])
        for col in R.ANALYSIS:
            aux[col] = rec[col][rows]
        return aux

    def _shaped_lines(self, batch, rows, details) -> bytes:
        """jsonl: frames of a learned shape print from its program, the others from their full decode."""
        import json

        from ibwire.report.packets import formats
        from ibwire.report.packets.values import json_safe

        rec, progs = batch.rec, []
        prog_of = self.shapes.assign(batch, rows, progs)
        decoded = dict(self._storage_decodes(batch, rows, details))
        prog_of[list(decoded)] = -1
        aux = self._aux(batch, rows)
        for k in np.flatnonzero(prog_of < 0).tolist():
            d = decoded.get(k)
            if d is None:
                d = details(int(rows[k]))
                self._feed_rmpp(d)
            obj = json_safe(d.to_json(), "")
            obj["time"] = 0
            head, _, tail = json.dumps(obj).partition('"time": 0')
            prog_of[k] = len(progs)
            progs.append(
                compile_parts([head, '"time": ', ("span", "epoch", formats.JSON_TIME_DECIMALS), tail + "\n"], AUX)
            )
        if len(rows):
            self.prev_shown = int(rec["time_ns"][rows[-1]])
        self.prev = int(rec["time_ns"][-1])
        start, length = batch.pos.data[rows].astype(np.int64), batch.pos.caplen[rows].astype(np.int64)
        return render(aux, np.arange(len(rows)), prog_of.astype(np.int32), progs, None, (batch.buf, start, length))

    def _document_text(self, td, d, ns: int, prev: int, fed: bool, tree: bool = False) -> str:
        """One frame's -T json document from its full decode, with the comma before all but the first (-V:
        its tree, NUL-terminated)."""
        if not fed:
            self._feed_rmpp(d)
        last = self.prev_shown if self.prev_shown is not None else ns
        layers = td.document(d, td.Times(ns, ns - prev, ns - last, ns - self.t0), self.session)
        self.prev_shown = ns
        if tree:
            from ibwire.report.packets.tree import own_fields, tree_text

            return tree_text(layers, d.flat, own_fields(d.flat, layers)) + "\n\0"
        day = time.strftime("%Y-%m-%d", time.localtime(ns // 10**9))
        if self.fmt == "ek":
            return td.ek_index(f"packets-{day}") + td.ek_text(ns // 10**6, layers) + "\n"
        text = (",\n" if self.started else "\n") + td.json_text(f"packets-{day}", layers, False)
        self.started = True
        return text

    def _documents(self, batch, rows, details) -> bytes:
        return "".join(self._document_texts(batch, rows, details)).encode()

    def _document_texts(self, batch, rows, details) -> List[str]:
        """tshark's -T json / -T ek documents (or -V trees) of the rows, from each frame's full decode."""
        from ibwire.report.packets import tshark_doc as td

        self.session = self.session or td.Session()
        rec = batch.rec
        t = rec["time_ns"]
        out = []
        shown = np.zeros(len(rec), bool)
        shown[rows] = True
        roce2 = np.isin(rec["link"], (R.ROCE2V4, R.ROCE2V6)) & ~shown
        hidden = set(self._hidden_tcp_icmp(rec, rows, not self.keys))
        for i in range(len(rec)):
            if not shown[i]:  # udp.stream counts the frames not shown too (RoCEv2 ones here)
                if i in hidden:
                    self._feed_hidden(batch, [i], i + 1)
                elif roce2[i]:
                    r = rec[i]
                    self.session.note(
                        r["src"].tobytes(), int(r["udp_src"]), r["dst"].tobytes(), int(r["udp_dst"]), int(t[i])
                    )
                continue
            d = details(i)
            self._feed_rmpp(d)
            ns = int(t[i])
            prev = int(t[i - 1]) if i else (self.prev if self.prev is not None else ns)
            last = self.prev_shown if self.prev_shown is not None else ns
            layers = td.document(d, td.Times(ns, ns - prev, ns - last, ns - self.t0), self.session)
            self.prev_shown = ns
            if self.fmt == "tree":
                from ibwire.report.packets.tree import own_fields, tree_text

                out.append(tree_text(layers, d.flat, own_fields(d.flat, layers)) + "\n")
                continue
            fields_only = bool(self.keys)
            if fields_only:
                from ibwire.report.packets.tcp_icmp_fields import only_fields

                layers = only_fields(layers, self.fields)
            elif self.protocols:
                layers = td.only_layers(layers, self.protocols, self.protocol_children)
            day = time.strftime("%Y-%m-%d", time.localtime(ns // 10**9))
            if self.fmt == "json":
                out.append((",\n" if self.started else "\n") + td.json_text(f"packets-{day}", layers, fields_only))
                self.started = True
            else:
                out.append(
                    td.ek_index(f"packets-{day}")
                    + td.ek_text(ns // 10**6, layers, fields_only, bool(self.protocols) and not self.protocol_children)
                    + "\n"
                )
        self.prev = int(t[-1])
        return out

    def _feed_rmpp(self, d) -> None:
        if self.nvme is not None:
            self.nvme.feed(d)
        if d.flat.get("mad.mgmtclass") == RMPP_CLASS:
            from ibwire.decode.rmpp import RmppTracker

            self.rmpp = self.rmpp or RmppTracker()
            self.rmpp.feed(d)

    def _program(self, row1) -> Optional[bytes]:
        if self.fmt == "text":
            return compile_parts(summary.record_parts(row1[0], self._time_part()))
        from ibwire.decode.record_filter import NotBatchable
        from ibwire.report.packets import formats

        try:
            parts = formats.fields_parts(self.keys, row1, self.sep, self.quote, self.time_base, self.minimal)
        except (formats.Unsure, NotBatchable):  # a field only the full decode knows (the probe cannot tell)
            return None
        return compile_parts(parts)

    def _detail_program(self, d, row, prev_ns: int) -> bytes:
        self._feed_rmpp(d)
        if self.fmt == "text":
            self.echo = self.echo or summary.EchoPairs()
            return compile_parts(summary.detail_parts(d, self._time_part(), self.echo.note(d.flat, d.frame.number)))
        import json

        from ibwire.decode.docfields import TYPES
        from ibwire.report.packets import formats
        from ibwire.report.packets.values import doc_first, doc_name, doc_text, json_safe

        if self.fmt == "jsonl":
            obj = json_safe(d.to_json(), "")
            obj["time"] = 0
            head, _, tail = json.dumps(obj).partition('"time": 0')
            return compile_parts([head, '"time": ', ("time", "time_ns", formats.JSON_TIME_DECIMALS), tail + "\n"])
        parts, tshark = [], None
        for i, key in enumerate(self.keys):
            if i:
                parts.append(self.sep)
            if key == self.time_base or (key == "frame.time_epoch" and self.time_base is None):
                v = [("time", "time_ns", 9)]  # exact nanoseconds, as the records print them
            elif key in ("frame.time_epoch", "frame.time_relative", "frame.time_delta"):
                ns = int(row["time_ns"]) - {"frame.time_relative": self.t0, "frame.time_delta": prev_ns}.get(key, 0)
                text = f"{'-' if ns < 0 else ''}{abs(ns) // 10**9}.{abs(ns) % 10**9:09d}"
            elif key in TYPES and key.partition(".")[0] not in d.layers and not _carried(key, d.flat):
                text = ""  # (a tcp or icmp field: from the document of frames with that protocol only)
            else:
                text = _field_text(key, d.flat)
                if (text == "" or doc_first(key) or _carried(key, d.flat)) and doc_name(key):  # only tshark's
                    if tshark is None:
                        tshark = self._document_values(d, int(row["time_ns"]), prev_ns)
                    text = printable(doc_text(doc_name(key), tshark)) or text
            if key != self.time_base and not (key == "frame.time_epoch" and self.time_base is None):
                v = [text] if text != "" else []
            if v and self.minimal and isinstance(v[0], str) and any(c in v[0] for c in (self.sep, '"', "\n")):
                v = ['"' + v[0].replace('"', '""') + '"']
            parts += [self.quote] + v + [self.quote] if v and self.quote else v
        return compile_parts(parts + ["\n"])

    def _document_values(self, d, ns: int, prev_ns: int) -> dict:
        """Every field of the frame's tshark-shaped document (-T json's), by Wireshark name: its values."""
        from ibwire.decode.docfields import TYPES
        from ibwire.report.packets import tshark_doc as td
        from ibwire.report.packets.tcp_icmp_fields import add_tcp_icmp
        from ibwire.report.packets.tree import layer_label

        self.session = self.session or td.Session()
        last = self.prev_shown if self.prev_shown is not None else ns
        found: dict = {}
        for name, items in td.document(d, td.Times(ns, ns - prev_ns, ns - last, ns - self.t0), self.session):
            found.setdefault(name, []).append(layer_label(name, items))  # what tshark prints for the protocol
            ours = name in ("tcp", "icmp")  # (their fields: from add_tcp_icmp, with the subtrees' names)
            for k, v in td.leaves(items, []):
                if not (ours and k in TYPES):
                    found.setdefault(k, []).append(v)
            if ours:
                add_tcp_icmp(items, found)
        return found


def _decode(frame, row):
    """A frame's full decode, with the RC analysis fields of `row` (records or AUX) when given."""
    from ibwire.decode import decode_frame
    from ibwire.decode.stream import with_analysis

    d = decode_frame(frame)
    return d if row is None else with_analysis(d, row)


def _carried(key: str, flat: dict) -> bool:
    """An IP, IPv6 or TCP field of an ICMP or ICMPv6 error: the document holds the outer header's and the carried one's."""
    errors = flat.get("icmp.type") in (3, 4, 5, 11, 12) or flat.get("icmpv6.type") in (1, 2, 3, 4)
    return errors and key.startswith(("ip.", "ipv6.", "tcp."))


def _field_text(key: str, flat: dict) -> str:
    from ibwire.report.packets.values import SELF_NAMED, value_text

    v = flat.get(key)
    if v is None:
        return ""
    vals = v if isinstance(v, list) else [v]
    # tshark escapes \n and \t in a string field; ESC and the other controls too here, never sent raw
    return ",".join(printable(value_text(key, x, sep="")) for x in (vals * 2 if key in SELF_NAMED else vals))
