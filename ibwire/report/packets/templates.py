"""Programs that print a frame's whole document (-T json, jsonl) from its bytes, learned from the full decode.

Frames of one *shape* — the same link type, lengths, CRC verdicts and opcode, and the same bytes except in
the value fields of VOLATILE (addresses, QPs, PSNs, RETH …), the payload and the CRCs — decode to documents
that differ only where those bytes, or the frame's number and times, are printed.  The program of a shape
is learned from its first frame: the frame is decoded in full, then the fewest copies (FEWEST to MUTANTS) of it
whose codes number every volatile bit, each bit set by a code of its own (each bit a different pattern over the copies), the payload
randomised and the CRCs sealed again; every item whose text changes must be explained by one run of
frame bits (or one of the frame's numbers and times) printed in one of tshark's formats, found from the
codes and checked against every copy, or there is no program and the shape's frames are decoded in full.
The program is finally rendered for every copy and must reproduce the full decode's text exactly.
"""

import functools
import ipaddress
import os
import random
import re
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np

from dissectors.crc import icrc_ib, icrc_roce1, icrc_roce2, vcrc
from dissectors.mad.base import MirrorField
from ibwire.decode import records as R
from ibwire.decode.rmpp import RMPP_DATA
from ibwire.files import Frame
from ibwire.report.packets.learned_store import Shape
from ibwire.report.packets.program import AUX, META, compile_parts, render

MUTANTS = 12
FEWEST = 10  # copies enough while their 912 codes number every volatile bit (a MAD has up to ~700)
FREE = (1 << 64) - 1
HOPS = 0x3F3F  # a directed-route SMP's hop pointer and count (class-specific bits), up to 63 as paths allow
PATH = (1 << 512) - 1  # a directed-route SMP's 64-byte initial and return paths
MAC_VALUE = (1 << 24) - 1  # a MAC's last 3 octets: its OUI names the vendor (eth.*.oui_resolved, manuf.py)
# scapy layer -> field -> the value bits that may differ between frames of one shape (the others, which
# decide how a frame decodes: membership, QP 0/1, ephemeral ports, multicast LIDs, stay in the shape)
VOLATILE = {
    "ERF": {"ts_frac": FREE, "ts_sec": FREE, "lctr": FREE},
    "Ether": {"dst": MAC_VALUE, "src": MAC_VALUE},
    "Dot1Q": {"vlan": FREE},
    "IP": {"id": FREE, "chksum": FREE, "src": FREE, "dst": FREE},
    "IPv6": {"fl": FREE, "src": FREE, "dst": FREE},
    "UDP": {"sport": 0x3FFF},
    "LRH": {"dlid": 0x3FFF, "slid": 0x3FFF},
    "GRH": {"flowlabel": FREE, "sgid": FREE, "dgid": FREE},
    "BTH": {"p_key": 0x7FFF, "destqp": 0x3FFFFF, "psn": FREE},
    "RETH": {"va": FREE, "r_key": FREE, "dmalen": FREE},
    "AETH": {"msn": FREE},
    "DETH": {"q_key": 0x7FFFFFFF, "srcqp": 0x3FFFFF},
    "AtomicETH": {"va": FREE, "r_key": FREE, "swapdt": FREE, "cmpdt": FREE},
    "AtomicAckETH": {"origremdt": FREE},
    "ImmDt": {"data": FREE},
    "IETH": {"r_key": FREE},
    "XRCETH": {"xrcsrq": FREE},
    # MADs: the transaction, keys, LIDs, GUIDs, QPs and counters, which tshark prints as plain numbers
    # (fields it names by value, the class, method, attribute, status, hop counts, RMPP header and
    # component mask stay in the shape)
    "MAD": {"transactionid": FREE, "attributemodifier": FREE, "classspecific": HOPS},
    "SMPLID": {"mkey": FREE},
    "SMPDirected": {"mkey": FREE, "drslid": FREE, "drdlid": FREE, "initialpath": PATH, "returnpath": PATH},
    "SA": {"smkey": FREE},
    "PortInfo": {"m_key": FREE, "gidprefix": FREE, "lid": FREE, "mastersmlid": FREE, "m_keyleaseperiod": FREE},
    "NodeInfo": {
        "systemimageguid": FREE,
        "nodeguid": FREE,
        "portguid": FREE,
        "deviceid": FREE,
        "revision": FREE,
        "vendorid": FREE,
    },
    "SMInfo": {"guid": FREE, "sm_key": FREE, "actcount": FREE},
    "PortCounters": {
        name: FREE
        for name in (
            "symbolerrorcounter linkerrorrecoverycounter linkdownedcounter portrcverrors "
            "portrcvremotephysicalerrors portrcvswitchrelayerrors portxmitdiscards portxmitconstrainterrors "
            "portrcvconstrainterrors vl15dropped portxmitdata portrcvdata portxmitpkts portrcvpkts portxmitwait"
        ).split()
    },
    "PortCountersExtended": {
        name: FREE
        for name in (
            "portxmitdata portrcvdata portxmitpkts portrcvpkts portunicastxmitpkts portunicastrcvpkts "
            "portmulticastxmitpkts portmulticastrcvpkts"
        ).split()
    },
    "PathRecord": {"serviceid": FREE, "dgid": FREE, "sgid": FREE, "dlid": FREE, "slid": FREE},
    "MCMemberRecord": {"mgid": FREE, "portgid": FREE, "q_key": FREE, "mlid": FREE},
    "PortInfoRecord": {"endportlid": FREE},
    "NodeRecord": {"lid": FREE},
    "LinkRecord": {"fromlid": FREE, "tolid": FREE},
}
MARK = "@@T{}@@"
MARK_RE = re.compile(r'"?@@T(\d+)@@"?')
HEX_RE = re.compile(r"0x[0-9a-f]+")
# what a shared start (read backwards) or end must give back: part of a value cut in two
WORD_END = re.compile(r"[0-9A-Za-z_-]*(?:[.:]+[0-9A-Za-z_-]*)*")  # (an IPv6 address may start "::")
WORD_START = re.compile(r"[0-9A-Za-z_-]*(?:[.:][0-9A-Za-z_-]+)*")
SEPARATORS = re.compile(r"((?:[ ()\[\],=/]|: )+)")
BYTES_RE = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2})*")
PLAIN_BYTES_RE = re.compile(r"(?:[0-9a-f]{2})+")


RANGES = {"frame": (1, 1 << 31), "epoch": (10**17, 2 * 10**18), "stream": (1, 1 << 20), "interface": (1, 1 << 20)}


def _bits(f) -> Optional[int]:
    """A field's width in bits (None: not fixed; 0: it shows bits of an earlier layer)."""
    if isinstance(f, MirrorField):
        return 0
    return round(8 * getattr(f, "sz", 0)) or None


def _placed(pkt):
    """(layer, name, its bytes, offset in the frame) of each layer; a layer whose payload lies inside its
    own bytes (`payload_window`: offset, length; a directed-route SMP's data) has that payload placed
    there, and what follows the window after the layer."""
    off, window, layer = 0, None, pkt
    while layer is not None and type(layer).__name__ != "NoPayload":
        raw = getattr(layer, "raw_packet_cache", None)
        yield layer, type(layer).__name__, raw, off
        if raw is None:
            return
        carve = getattr(layer, "payload_window", None)
        if carve is not None:
            window, off = [carve[1], off + len(raw)], off + carve[0]
        else:
            off += len(raw)
            if window is not None:
                window[0] -= len(raw)
                if window[0] <= 0:
                    off, window = window[1], None
        layer = layer.payload


def layout(pkt, steady: tuple = ()) -> Optional[tuple]:
    """(head, trailer layers, spots): where the packet's headers end, its CRC layers [(name, offset)] and
    the volatile fields [(bit offset, bits, may-vary mask)], from the layers' own field lists; None if a
    layer's length is unknown."""
    spots, trailer, head = [], [], 0
    for layer, name, raw, off in _placed(pkt):
        if raw is None:
            return None
        if name in ("ICRC", "VCRC"):
            trailer.append((name, off))
        elif name not in ("Raw", "Padding", "IBPad"):
            head = max(head, off + len(raw))
        bit = 8 * off
        for f in layer.fields_desc:
            n = _bits(f)
            if n is None:
                break
            vary = None if (name, f.name) in steady else VOLATILE.get(name, {}).get(f.name)
            if vary:
                spots.append((bit, n, vary & ((1 << n) - 1)))
            bit += n
    return head, trailer, spots


def _get_bits(data: bytes, last: int, n: int) -> int:
    """The n bits of `data` that end at bit `last` (MSB first), as a big-endian number."""
    word = int.from_bytes(data[(last - n + 1) // 8 : last // 8 + 1], "big")
    return word >> (7 - last % 8) & ((1 << n) - 1)


@functools.lru_cache(maxsize=None)
def _codes(copies: int) -> np.ndarray:
    """Patterns over `copies` mutants, one per volatile bit, in a fixed random order: never all equal, no two
    alike, each bit set in about half the mutants, and in and out of at least 3 (so no mutant's QP or port
    is left at a value that decodes apart)."""
    codes = [c for c in range(1, 1 << copies) if 3 <= bin(c).count("1") <= copies - 3]
    random.Random(1).shuffle(codes)
    return np.array(codes, np.int64)


def _seal(data: bytearray, trailer: list, starts: dict) -> None:
    """Recompute the ICRC (and VCRC) of a mutated frame, as the sender would have."""
    for name, at in trailer:
        if name == "ICRC":
            if "LRH" in starts:
                v = icrc_ib(data[starts["LRH"] : at])
            elif "IP" in starts or "IPv6" in starts:
                s = starts.get("IP", starts.get("IPv6"))
                v = icrc_roce2(data[s:at])
            else:
                v = icrc_roce1(data[starts["GRH"] : at])
            data[at : at + 4] = v.to_bytes(4, "little")
        else:
            data[at : at + 2] = vcrc(data[starts["LRH"] : at]).to_bytes(2, "little")


def mutants(frame: Frame, pkt, sealed: bool, kept: int = 0, steady: tuple = (), seed: int = 1) -> Optional[tuple]:
    """(Frames, keep mask, head): the fewest copies of `frame` (FEWEST to MUTANTS) whose codes tell every
    volatile bit apart, each bit coded, the payload
    random but for its first `kept` bytes (which then belong to the shape, as the headers do), and (when
    `sealed`, i.e. the original's CRCs were good) the CRCs recomputed."""
    lay = layout(pkt, steady)
    if lay is None:
        return None
    head, trailer, spots = lay
    head = min(head + kept, min([at for _, at in trailer] + [len(frame.data)]))
    starts = {}
    for _, name, _, off in _placed(pkt):
        starts.setdefault(name, off)
    keep = np.full(head, 0xFF, np.uint8)
    rnd = random.Random(seed)
    where = np.array(
        [bit + n - 1 - j for bit, n, vary in spots for j in range(n) if vary >> j & 1], np.int64
    )  # every volatile bit, MSB-first positions
    where = where[where < 8 * len(frame.data)]
    inside = where[where < 8 * head]
    np.bitwise_and.at(keep, inside // 8, ~(0x80 >> (inside % 8)).astype(np.uint8))
    copies = next((n for n in range(FEWEST, MUTANTS + 1) if len(_codes(n)) >= len(where)), None)
    if copies is None:
        return None
    codes = _codes(copies)[: len(where)]
    original = np.unpackbits(np.frombuffer(frame.data, np.uint8))
    out = []
    for s in range(copies):
        bits = original.copy()
        bits[where] = codes >> s & 1
        data = bytearray(np.packbits(bits).tobytes())
        data[head:] = rnd.randbytes(len(data) - head)  # the rest of the payload, pad and CRCs: any bytes
        if sealed and trailer and not any(at + (4 if n == "ICRC" else 2) > len(data) for n, at in trailer):
            _seal(data, trailer, starts)
        out.append(frame._replace(data=bytes(data)))
    return out, keep, head


def _metas(rnd: random.Random, row) -> np.ndarray:
    """Random, distinct numbers for the mutants' frames (their dates days apart), and for each RC analysis
    column the representative `row` carries, a random value of its own (flags and causes kept)."""
    out = np.zeros(MUTANTS, AUX)
    for name in META + ("interface",):
        lo, hi = RANGES.get(name, (1, 10**12))
        out[name] = [rnd.randrange(lo, hi) for _ in range(MUTANTS)]
    out["epoch_ms"] = out["epoch"] // 10**6
    for col, (_, kind) in R.ANALYSIS.items():
        if kind in ("flag", "cause") or not R.analysis_present(row, col):
            out[col] = row[col]
        else:
            hi = min(10**12, np.iinfo(AUX[col]).max)
            out[col] = [rnd.randrange(1, hi) for _ in range(MUTANTS)]
    return out


# ---- explaining an item's text ----


class Metas:
    """The samples' numbers (AUX rows) and the texts each meta column prints in each format, worked out once
    for all the items of a shape."""

    def __init__(self, rows: np.ndarray, formats: Dict[str, Callable]):
        self.rows, self.formats, self.index = rows, formats, None

    def ops(self, texts: List[str]) -> Optional[list]:
        """The first meta column and format (AUX's order, then the formats') that prints every sample's text."""
        if self.index is None:
            self.index = {}
            for name in AUX.names:
                column = self.rows[name].tolist()
                if len(set(column)) < len(column):
                    continue  # a column the shape fixes
                for fn, parts in self.formats.values():
                    try:
                        self.index.setdefault(tuple(fn(v) for v in column), (parts, name))
                    except (ValueError, OverflowError, OSError):
                        continue  # a number this format cannot print is not what an item shows
        hit = self.index.get(tuple(texts))
        return hit[0](hit[1]) if hit else None


class Samples(list):
    """The mutants' frame bytes, with where each pattern of one bit over them stands in the frames."""

    def __init__(self, datas: List[bytes]):
        super().__init__(datas)
        n = min(len(d) for d in datas)
        bits = np.unpackbits(np.array([np.frombuffer(d[:n], np.uint8) for d in datas]), axis=1)
        codes = (bits.astype(np.uint64) << np.arange(len(datas), dtype=np.uint64)[:, None]).sum(axis=0)
        order = np.argsort(codes, kind="stable")
        self.codes, self.order = codes[order], order

    def where(self, column: List[int]) -> np.ndarray:
        """Frame bit positions (MSB first) whose value in sample s is column[s], for every s."""
        code = sum(c << s for s, c in enumerate(column))
        lo, hi = np.searchsorted(self.codes, [code, code + 1])
        return self.order[lo:hi]


def _run_of(datas: Samples, values: List[int]) -> Optional[tuple]:
    """(last bit, bits) of the big-endian run of frame bits that holds values[s] in datas[s] for every s."""
    low = next((j for j in range(64) if len({v >> j & 1 for v in values}) > 1), None)
    if low is None:
        return None
    top = max(v.bit_length() for v in values)
    for g in datas.where([v >> low & 1 for v in values]).tolist():
        last = g + low
        for n in range(max(top, low + 1), 65):
            if last - n + 1 < 0 or last >= 8 * len(datas[0]):
                break
            if all(_get_bits(d, last, n) == v for d, v in zip(datas, values)):
                return last, n
    return None


def _int_op(datas, values, digits: int) -> Optional[tuple]:
    run = _run_of(datas, values)
    if run is None:
        return None
    last, n = run
    first = last - n + 1
    at, end = first // 8, last // 8
    if end - at + 1 > 8:
        return None
    return ("fint", at, end - at + 1, 7 - last % 8, n, digits)


def _bytes_op(datas, chunks: List[bytes], sep: str) -> Optional[tuple]:
    if not chunks[0]:
        return None
    start = datas[0].find(chunks[0])
    while start >= 0:
        if all(d[start : start + len(c)] == c for d, c in zip(datas, chunks)):
            return ("fhex", start, start + len(chunks[0]), sep) if sep is not None else start
        start = datas[0].find(chunks[0], start + 1)
    return None


def _little_op(datas, values, digits: int) -> Optional[tuple]:
    """A little-endian integer of 2, 4 or 8 whole bytes (ERF's header) holding values[s] in datas[s]."""
    for n in (2, 4, 8):
        if max(values).bit_length() > 8 * n:
            continue
        at = _bytes_op(datas, [v.to_bytes(n, "little") for v in values], None)
        if at is not None:
            return ("fint", at, 0x80 | n, 0, 8 * n, digits)
    return None


def _hex_parts(texts, datas) -> Optional[list]:
    if not all(HEX_RE.fullmatch(t) for t in texts):
        return None
    digits = min(len(t) for t in texts) - 2
    values = [int(t, 16) for t in texts]
    if any(t != f"0x{v:0{digits}x}" for t, v in zip(texts, values)):
        return None
    op = _int_op(datas, values, digits) or _little_op(datas, values, digits)
    return ["0x", op] if op else None


def _dec_parts(texts, datas) -> Optional[list]:
    if not all(t.isdigit() and (t == "0" or t[0] != "0") for t in texts):
        return None
    values = [int(t) for t in texts]
    op = _int_op(datas, values, 0) or _little_op(datas, values, 0)
    return [op] if op else None


def _hex_bytes_parts(texts, datas) -> Optional[list]:
    for sep, form in ((":", BYTES_RE), ("", PLAIN_BYTES_RE)):
        if all(form.fullmatch(t) for t in texts):
            op = _bytes_op(datas, [bytes.fromhex(t.replace(":", "")) for t in texts], sep)
            if op:
                return [op]
    return None


def _address_parts(texts, datas) -> Optional[list]:
    try:
        packed = [ipaddress.ip_address(t).packed for t in texts]
    except ValueError:
        return None
    if len({len(p) for p in packed}) != 1:
        return None
    at = _bytes_op(datas, packed, None)
    return None if at is None else [("fip4" if len(packed[0]) == 4 else "fip6", at)]


def explain(texts: List[str], datas: List[bytes], metas: Metas) -> Optional[list]:
    """Parts that print texts[s] from frame datas[s] with numbers metas.rows[s], for every sample s."""
    found = metas.ops(texts)
    for way in (_hex_parts, _dec_parts, _hex_bytes_parts, _address_parts):
        found = found or way(texts, datas)
    return found


def explain_line(texts: List[str], datas: List[bytes], metas: Metas) -> Optional[list]:
    """A line of text whose values change (`Identification: 0x4ead (20141)`): the text the samples share
    before and after, cut at a word's edge, then the rest as a whole value or as values between separators
    every sample has alike."""
    head = os.path.commonprefix(texts)
    tail = os.path.commonprefix([t[::-1] for t in texts])[::-1]
    short = min(len(t) for t in texts)
    if len(head) + len(tail) > short:
        tail = tail[len(head) + len(tail) - short :]
    head = head[: len(head) - len(WORD_END.match(head[::-1]).group(0))]
    tail = tail[len(WORD_START.match(tail).group(0)) :]
    for end in (tail, ""):  # the value may run to the line's end (a time and its zone)
        whole = explain([t[len(head) : len(t) - len(end)] for t in texts], datas, metas)
        if whole:
            return [head, *whole, end]
    middles = [t[len(head) : len(t) - len(tail)] for t in texts]
    pieces = [SEPARATORS.split(m) for m in middles]
    if len({len(p) for p in pieces}) != 1:
        return None
    parts = [head]
    for k, column in enumerate(zip(*pieces)):
        if k % 2 or len(set(column)) == 1:  # a separator, or a word all samples share
            if len(set(column)) != 1:
                return None
            parts.append(column[0])
            continue
        found = explain(list(column), datas, metas)
        if found is None:
            return None
        parts += found
    return parts + [tail]


# ---- programs ----


class Format(NamedTuple):
    """An output format as the learner sees it: `items(d, meta)` gives a decoded frame's (signature,
    item values, replace) where replace([(index, text)]) is the frame's text with those items' values
    replaced; `meta_formats`: name -> (text of a number, its parts given a column name); `lines`: items are
    lines of text (explain_line), not single values; `steady`: volatile fields this format keeps in the
    shape (those it draws as bit pictures)."""

    items: Callable
    meta_formats: dict
    lines: bool = False
    steady: tuple = ()


def _text(v) -> str:
    return v if isinstance(v, str) else str(v)


def learn(frame: Frame, row, decode: Callable, fmt: Format, kept: int = 0, steady: tuple = ()) -> Optional[Shape]:
    """The program of the shape of `frame` (its record `row`), or None when its documents cannot be printed
    from one.  `decode(frame, row)` is the full decode (ibwire.decode.Decoded) with the RC analysis of a row
    (of AUX or the records); the first `kept` payload bytes are the shape's (those an upper layer's
    heuristic would read), and so are the `steady` fields [(layer, field)] of VOLATILE.  The program must
    print the frame itself as its full decode does, and every mutant."""
    icrc_good = int(row["icrc"]) == R.GOOD
    metas = _metas(random.Random(7), row)
    first = frame._replace(number=int(metas[0]["frame"]))  # the frame itself, printed as a mutant is
    d0 = decode(first, metas[0])
    if d0.packet is None or d0.flat.get("rmpp.rmpptype") == RMPP_DATA:
        return None  # (an RMPP DATA segment's decode depends on the transfer's other segments)
    made = mutants(frame, d0.packet, icrc_good, kept, fmt.steady + steady)
    if made is None:
        return None
    frames, keep, head = made
    metas = metas[: len(frames)]
    frames = [f._replace(number=int(m["frame"])) for f, m in zip(frames, metas)]
    samples = [fmt.items(decode(f, m), m) for f, m in zip(frames, metas)]
    sig, values, replace = samples[0]
    if any(s[0] != sig for s in samples):
        return None
    datas, known = Samples([f.data for f in frames]), Metas(metas, fmt.meta_formats)
    parts_of = {}
    for i in range(len(values)):
        texts = [_text(s[1][i]) for s in samples]
        if len(set(texts)) > 1:
            parts = (explain_line if fmt.lines else explain)(texts, datas, known)
            if parts is None:
                return None
            parts_of[i] = parts
    text = replace([(i, MARK.format(i)) for i in parts_of])
    program, pos, marks = [], 0, 0
    for m in MARK_RE.finditer(text):
        i = int(m.group(1))
        q = '"' if m.group(0)[0] == '"' and type(values[i]) is str else ""  # a str subclass is a number's text
        program += [text[pos : m.start()], q, *parts_of[i], q]
        pos, marks = m.end(), marks + 1
    program.append(text[pos:])
    if marks != len(parts_of):
        return None
    shape = Shape(compile_parts([p for p in program if p != ""], AUX), head, keep)
    frames.append(first)
    samples.append(fmt.items(d0, metas[0]))
    want = "".join(s[2]([]) for s in samples)
    return shape if _render(shape.program, frames, np.concatenate([metas, metas[:1]])) == want else None


def _render(program: bytes, frames: List[Frame], metas: np.ndarray) -> str:
    buf = np.frombuffer(b"".join(f.data for f in frames), np.uint8)
    lens = np.array([len(f.data) for f in frames], np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    n = len(frames)
    return render(metas, np.arange(n), np.zeros(n, np.int32), [program], None, (buf, starts, lens)).decode()
