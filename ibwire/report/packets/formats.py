"""`-e` field columns of a record as line programs (ibwire.report.packets.program).

A record holds the headers the compiled decoder reads (encapsulation, LRH, GRH, BTH, extended headers,
MAD common header, CRC verdicts); a field it lacks hands the frame to the full decode.  Field columns print values as tshark's `-T fields` does: its display base per field (hex fields
zero-padded to the field's width), `a,b` for the either-end fields.
"""

from typing import List, Optional

import numpy as np

from dissectors.opcodes import OPCODES
from ibwire.decode import records as R
from ibwire.decode.fieldtypes import EITHER, HEX_DIGITS, field_type
from ibwire.decode.record_filter import Ctx, NotBatchable, _columns
from ibwire.report.packets.values import doc_first

# Address fields: the record column and whether it is always IPv6 (a GID or IPv6 address whose IPv4-mapped
# form prints as ::ffff:a.b.c.d, as tshark prints it) rather than IPv4 where it is mapped.
ADDRESS = {
    "ip.src": ("src", 0),
    "ip.dst": ("dst", 0),
    "ipv6.src": ("src", 1),
    "ipv6.dst": ("dst", 1),
    "grh.sgid": ("src", 1),
    "grh.dgid": ("dst", 1),
}
JSON_TIME_DECIMALS = 9


class Unsure(Exception):
    """This record cannot answer for the field: print the frame from the full decode."""


def _present(key: str, row1: np.ndarray) -> bool:
    cols = _columns(key, Ctx(row1, 0.0, None))
    if not all(bool(c.sure[0]) for c in cols):
        raise Unsure(key)
    return any(bool(c.present[0]) for c in cols)


def leaf_parts(key: str, row1: np.ndarray, time_base: Optional[str]) -> list:
    """Parts printing field `key` of records like row1 ([] when absent); raises NotBatchable for fields
    the records lack, Unsure where the full decode must answer."""
    if key in EITHER:
        a, b = (leaf_parts(k, row1, time_base) for k in EITHER[key])
        return a + [","] + b if a and b else a or b
    if field_type(key) is None or doc_first(key):  # tshark's document alone holds it: the full decode
        raise NotBatchable(key)
    row = row1[0]
    shown, key = key, _atomic_alias(key, row)
    if not _present(key, row1):
        return []
    if key == "frame.time_epoch":  # beside a relative field (which takes the line's time base): no base
        return [("span", "time_ns", 9)] if time_base is not None else [("time", "time_ns", 9)]
    if key in ("frame.time_relative", "frame.time_delta"):
        if time_base != key:
            raise NotBatchable(key)
        return [("time", "time_ns", 9)]
    if key in ADDRESS:
        col, v6 = ADDRESS[key]
        return [("addr", col, 0, v6)]
    if key in ("eth.src", "eth.dst"):
        return [("mac", "eth_" + key[4:])]
    if key == "vlan.id":
        return [("idec", "vlan")]
    if key in ("icrc.status", "vcrc.status"):
        return [R.CRC_STATUS[int(row[key[:4]])]]
    if key == "link.kind":
        return [R.LINK_KINDS[int(row["link"])]]
    if key in R.ANALYSIS_FIELDS:
        return _analysis_parts(key, row)
    if key in ("ip.proto", "ipv6.nxt"):
        return ["17"]
    if key == "ip.version":
        return ["4"]
    if key == "eth.type":
        return [f"0x{ {R.ROCE1: 0x8915, R.ROCE2V4: 0x0800, R.ROCE2V6: 0x86DD}[int(row['link'])]:04x}"]
    col = R.KEY_FIELDS.get(key) or {"ipv6.tclass.ecn": "ecn"}.get(key)
    if col is None:
        raise NotBatchable(key)
    if shown in HEX_DIGITS:
        return ["0x", ("hex", col, HEX_DIGITS[shown])]
    return [("udec", col)]


def _analysis_parts(key: str, row, flag: str = "1") -> list:
    """An RC analysis field (records.ANALYSIS) of records like `row`, where present; `flag`: how a flag
    prints."""
    col = R.ANALYSIS_FIELDS[key]
    kind = R.ANALYSIS[col][1]
    if kind == "flag":
        return [flag]
    if kind == "cause":
        return [R.RETRY_CAUSES[int(row[col])]]
    return [("span", col, 9)] if kind == "span" else [("udec", col)]


# tshark names AtomicETH's VA and R_Key as RETH's (packet-infiniband.c), as the AtomicETH layer's ws_alias says.
_ATOMIC_ALIAS = {"reth.va": "atomiceth.va", "reth.r_key": "atomiceth.r_key"}


def _atomic_alias(key: str, row) -> str:
    if key in _ATOMIC_ALIAS and int(row["flags"]) & R.F_BTH:
        op = OPCODES.get(int(row["opcode"]))
        if op is not None and "atomiceth" in op.headers:
            return _ATOMIC_ALIAS[key]
    return key


def fields_parts(keys: List[str], row1, sep: str, quote: str, time_base, minimal: bool = False) -> list:
    """`minimal`: CSV quoting, only where a value may hold the separator (an either-end field's `a,b`)."""
    out = []
    for i, key in enumerate(keys):
        if i:
            out.append(sep)
        v = leaf_parts(key, row1, time_base)
        if minimal and sep == "," and key in EITHER and "," in v:
            v = ['"'] + v + ['"']
        out += [quote] + v + [quote] if v and quote else v
    return out + ["\n"]


def time_base_of(keys: List[str]) -> Optional[str]:
    """The one relative time field a field-column program may print from records."""
    return next((k for k in keys if k in ("frame.time_relative", "frame.time_delta")), None)
