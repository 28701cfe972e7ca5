"""Which packets carry each record field, and the address and MAC columns as text dictionaries: the
numpy half of the Arrow tables (`arrow`), run where the records are decoded (export's read-ahead thread)
so that the encoding thread only wraps buffers.

A field is present when its header is: LRH on native InfiniBand, Ethernet and UDP on RoCE, BTH and MAD
by the decoder's flags, each extended header by the opcode's layout (`dissectors.opcodes`), MAC control by
the ethertype and its PAUSE or PFC fields by the opcode.
"""

import numpy as np

from dissectors.numbers import ETHERTYPE_MAC_CONTROL, MACC_OPCODE_PAUSE, MACC_OPCODE_PFC
from dissectors.opcodes import OPCODES
from ibwire.analyze.hashing import group_rows
from ibwire.decode import records as R

_BTH_FIELDS = ("opcode", "se", "m", "padcnt", "tver", "p_key", "fecn", "becn", "destqp", "a", "psn", "paylen")
_MAD_FIELDS = ("mad_class", "mad_classver", "mad_method", "mad_status", "mad_attrid", "mad_attrmod", "mad_tid")
_LRH_FIELDS = ("slid", "dlid", "sl", "vl")
_PFC_FIELDS = ("macc_enbv",) + tuple(f"macc_pause_c{p}" for p in range(8))
# Record field -> the extended header (opcodes.py names) that carries it.
_EXT_OF = {
    "reth_va": "reth",
    "reth_r_key": "reth",
    "reth_dmalen": "reth",
    "aeth_syndrome": "aeth",
    "aeth_msn": "aeth",
    "deth_q_key": "deth",
    "deth_srcqp": "deth",
    "atomic_va": "atomiceth",
    "atomic_r_key": "atomiceth",
    "atomic_swapdt": "atomiceth",
    "atomic_cmpdt": "atomiceth",
    "atomicack": "atomicacketh",
    "immdt": "immdt",
    "ieth": "ieth",
    "xrcsrq": "xrceth",
}
_EXT = sorted(set(_EXT_OF.values()))
# Opcode -> one bit per extended header of _EXT that it carries (one lookup per packet finds them all).
_EXT_BITS = np.array(
    [sum(1 << k for k, h in enumerate(_EXT) if c in OPCODES and h in OPCODES[c].headers) for c in range(256)], np.uint16
)
_ETH_LINKS = np.array([k in (R.ROCE1, R.ROCE2V4, R.ROCE2V6) for k in range(256)])
_LRH_LINKS = np.array([k in (R.IB, R.IBGRH) for k in range(256)])
_UDP_LINKS = np.array([k in (R.ROCE2V4, R.ROCE2V6) for k in range(256)])
TEXT = {"src": R.addr_text, "dst": R.addr_text, "eth_src": R.mac_text, "eth_dst": R.mac_text}  # bytes -> text


def _nonzero(col: np.ndarray) -> np.ndarray:
    """Rows of a fixed-size bytes column (6 or 16 bytes) that hold anything but zero bytes (the words of
    each row or-ed column by column: a reduce along a short axis is many times slower)."""
    col = np.ascontiguousarray(col)
    words = col.view(np.uint16 if col.dtype.itemsize % 8 else np.uint64).reshape(len(col), -1)
    acc = words[:, 0].copy()
    for k in range(1, words.shape[1]):
        acc |= words[:, k]
    return acc != 0


def present(rec) -> dict:
    """Field -> bool array of the rows whose packet carries that field (absent fields are null); `rec`:
    records or their columns (decode.columns).  Fields that share a header share one array."""
    fl, link, op = rec["flags"], rec["link"], rec["opcode"]
    bth = (fl & R.F_BTH) > 0
    mad = (fl & R.F_MAD) > 0
    cm = mad & (rec["mad_class"] == 0x07)
    attr = rec["mad_attrid"]
    addr = ((fl & R.F_GRH) > 0) | _nonzero(rec["src"]) | _nonzero(rec["dst"])
    eth = _ETH_LINKS[link] | _nonzero(rec["eth_src"]) | _nonzero(rec["eth_dst"])
    out = {
        "eth_src": eth,
        "eth_dst": eth,
        "src": addr,
        "dst": addr,
        "ecn": addr,
        "dscp": addr & ~_LRH_LINKS[link],
        "vlan": rec["vlan"] >= 0,
        "pcp": rec["vlan"] >= 0,
        "etype": eth,
        "udp_src": _UDP_LINKS[link] | (rec["udp_src"] > 0) | (rec["udp_dst"] > 0),
        "cm_comm_id": cm,
        "cm_remote_comm_id": cm & (attr != 0x10),
        "cm_qpn": cm & ((attr == 0x10) | (attr == 0x13)),
    }
    out["udp_dst"] = out["udp_src"]
    macc = (rec["etype"] == ETHERTYPE_MAC_CONTROL) & (link != R.IPOIB)  # a MAC control frame: PAUSE, PFC
    out["macc_opcode"] = macc
    out["macc_pause_time"] = macc & (rec["macc_opcode"] == MACC_OPCODE_PAUSE)
    pfc = macc & (rec["macc_opcode"] == MACC_OPCODE_PFC)
    out.update({f: pfc for f in _PFC_FIELDS})
    lrh = _LRH_LINKS[link]
    out.update({f: lrh for f in _LRH_FIELDS})
    out.update({f: bth for f in _BTH_FIELDS})
    out.update({f: mad for f in _MAD_FIELDS})
    bits = np.where(bth, _EXT_BITS[op], 0)
    ext = {h: (bits & (1 << k)) > 0 for k, h in enumerate(_EXT)}
    out.update({f: ext[h] for f, h in _EXT_OF.items()})
    out.update({f: R.analysis_present(rec, f) for f, (_, kind) in R.ANALYSIS.items() if kind != "flag"})
    return out


_SEEN: dict = {}  # address or MAC bytes -> text (a capture has few endpoints; ipaddress is slow)


def _text(field: str, w: bytes) -> str:
    t = _SEEN.get(w)
    if t is None:
        if len(_SEEN) > 1 << 16:
            _SEEN.clear()
        t = _SEEN[w] = TEXT[field](w)
    return t


_TEXT_KEY = np.dtype([(f, R.RECORD[f]) for f in TEXT])


def text_dicts(cols_of: dict, n: int) -> dict:
    """Field -> (distinct values in text, each row's index among them as int32) of the address and MAC
    columns: one grouping of the rows by all four (a batch has few endpoint pairs), then each column's
    distinct values among the groups' first rows."""
    keys = np.empty(n, _TEXT_KEY)
    for f in TEXT:
        keys[f] = cols_of[f]
    _, first, inv = group_rows(keys, tuple(TEXT))
    out = {}
    for f in TEXT:
        heads = keys[f][first]
        _, distinct, pick = group_rows(heads.view(np.dtype([("k", heads.dtype)])), ("k",))
        out[f] = ([_text(f, bytes(heads[i])) for i in distinct.tolist()], pick.astype(np.int32)[inv])
    return out


def prepare(cols) -> tuple:
    """(present, text_dicts) of a block of columns (decode.columns): what `arrow.column_table` needs
    besides the block itself."""
    cols_of = cols.columns()
    return present(cols_of), text_dicts(cols_of, len(cols))
