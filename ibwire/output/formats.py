"""JSON objects and `-e` field columns of a record as line programs (ibwire.output.program).

A record shows the headers the compiled decoder reads (encapsulation, LRH, GRH, BTH, extended headers,
MAD common header, CRC verdicts); 64-bit values are "0x…" strings so that JSON readers keep every bit.
Field columns print values as tshark's `-T fields` does: its display base per field (hex fields
zero-padded to the field's width), `a,b` for the either-end fields.
"""
import json
from typing import List, Optional

import numpy as np

from dissectors.opcodes import OPCODES

from ..fast import records as R
from ..fast.filter import Ctx, NotBatchable, _columns
from ..fieldtypes import EITHER, HEX_DIGITS

# Address fields: the record column and whether it is always IPv6 (a GID or IPv6 address whose IPv4-mapped
# form prints as ::ffff:a.b.c.d, as tshark prints it) rather than IPv4 where it is mapped.
ADDRESS = {"ip.src": ("src", 0), "ip.dst": ("dst", 0), "ipv6.src": ("src", 1), "ipv6.dst": ("dst", 1),
           "grh.sgid": ("src", 1), "grh.dgid": ("dst", 1)}
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
    row = row1[0]
    shown, key = key, _atomic_alias(key, row)
    if not _present(key, row1):
        return []
    if key == "frame.time_epoch":
        if time_base is not None:              # one time base per line: the relative field takes it
            raise NotBatchable(key)
        return [("time", "time_ns", 9)]
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
        return [f'0x{ {R.ROCE1: 0x8915, R.ROCE2V4: 0x0800, R.ROCE2V6: 0x86DD}[int(row["link"])]:04x}']
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


def fields_parts(keys: List[str], row1, sep: str, quote: str, time_base) -> list:
    out = []
    for i, key in enumerate(keys):
        if i:
            out.append(sep)
        v = leaf_parts(key, row1, time_base)
        out += [quote] + v + [quote] if v and quote else v
    return out + ["\n"]


def time_base_of(keys: List[str]) -> Optional[str]:
    """The one relative time field a field-column program may print from records."""
    return next((k for k in keys if k in ("frame.time_relative", "frame.time_delta")), None)


# ---- JSON ----

_BY_HEADER = {}
for _col, _key in R.FIELD_KEYS.items():
    _proto, _, _name = _key.partition(".")
    _BY_HEADER.setdefault(_proto, []).append((_name, _col))


def _value(col: str) -> list:
    kind, size = R.RECORD[col].kind, R.RECORD[col].itemsize
    if kind == "u" and size == 8:
        return ['"0x', ("hex", col, 16), '"']
    return [("idec" if kind == "i" else "udec", col)]


def _obj(items) -> list:
    out = ["{"]
    for i, (name, parts) in enumerate(items):
        out += ([", "] if i else []) + [json.dumps(name) + ": "] + parts
    return out + ["}"]


def _header(proto: str) -> list:
    return [(name, _value(col)) for name, col in _BY_HEADER.get(proto, [])]


def errors_of(row) -> List[str]:
    f, out = int(row["flags"]), []
    if f & R.F_TRUNCATED:
        out.append("truncated")
    if f & R.F_MALFORMED:
        out.append("malformed")
    if row["icrc"] == R.BAD:
        out.append("bad ICRC")
    if row["vcrc"] == R.BAD:
        out.append("bad VCRC")
    if int(row["flags"]) & R.F_BTH and int(row["opcode"]) not in OPCODES:
        out.append(f"unknown opcode 0x{int(row['opcode']):02x}")
    return out


def layers_parts(row) -> list:
    link, flags = int(row["link"]), int(row["flags"])
    layers = []
    if int(row["linktype"]) == 1:
        layers.append(("eth", _obj([("src", ['"', ("mac", "eth_src"), '"']), ("dst", ['"', ("mac", "eth_dst"), '"'])])))
    if int(row["vlan"]) >= 0:
        layers.append(("vlan", _obj([("id", [("idec", "vlan")])])))
    addrs = [("src", ['"', ("addr", "src"), '"']), ("dst", ['"', ("addr", "dst"), '"'])]
    gids = [("src", ['"', ("addr", "src", 0, 1), '"']), ("dst", ['"', ("addr", "dst", 0, 1), '"'])]
    if link == R.ROCE2V4:
        layers.append(("ip", _obj(addrs + [("dsfield.ecn", [("udec", "ecn")])])))
    if link == R.ROCE2V6:
        layers.append(("ipv6", _obj(gids + [("tclass.ecn", [("udec", "ecn")])])))
    if link in (R.ROCE2V4, R.ROCE2V6):
        layers.append(("udp", _obj([("srcport", [("udec", "udp_src")]), ("dstport", [("udec", "udp_dst")])])))
    if link in (R.IB, R.IBGRH):
        layers.append(("lrh", _obj(_header("lrh"))))
    if link in (R.ROCE1, R.IBGRH):
        layers.append(("grh", _obj([("sgid", gids[0][1]), ("dgid", gids[1][1])])))
    if flags & R.F_BTH:
        layers.append(("bth", _obj(_header("bth"))))
        op = OPCODES.get(int(row["opcode"]))
        for h in op.headers if op else ():
            if h in _BY_HEADER:
                layers.append((h, _obj(_header(h))))
        if flags & R.F_MAD:
            layers.append(("mad", _obj(_header("mad"))))
    analysis = [(key.split(".", 2)[2], _analysis_parts(key, row, "true")) for key in R.analysis_values(row)]
    for i, (name, parts) in enumerate(analysis):
        if R.ANALYSIS[R.ANALYSIS_FIELDS["bth.analysis." + name]][1] == "cause":
            analysis[i] = (name, [json.dumps(parts[0])])
    if analysis:
        layers.append(("bth.analysis", _obj(analysis)))
    for crc in ("icrc", "vcrc"):
        if int(row[crc]) != R.ABSENT:
            layers.append((crc, _obj([("status", [json.dumps(R.CRC_STATUS[int(row[crc])])])])))
    return _obj(layers)


def json_parts(row) -> list:
    """One packet as a JSON object: frame, time, lengths, link type, layers, errors."""
    return _obj([("frame", [("udec", "frame")]), ("time", [("time", "time_ns", JSON_TIME_DECIMALS)]),
                 ("caplen", [("udec", "caplen")]), ("len", [("udec", "len")]), ("linktype", [("udec", "linktype")]),
                 ("layers", layers_parts(row)), ("errors", [json.dumps(errors_of(row))])]) + ["\n"]
