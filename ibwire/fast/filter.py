"""The display-filter language of ibwire.filter, evaluated on whole record batches at once.

The grammar (tokens, precedence, literals) is ibwire.filter's; only the evaluation differs: each node
returns a numpy boolean array over the batch instead of a bool for one packet.
"""
import ipaddress
from typing import Callable

import numpy as np

from ..errors import UserError
from ..filter import OPERATORS, Filter
from dissectors.opcodes import HEADER_LEN, OPCODES

from . import records as R

# Extended header -> which opcodes carry it (dissectors.opcodes), for presence tests such as `reth`.
_CARRIED = {h: np.array([c in OPCODES and h in OPCODES[c].headers for c in range(256)]) for h in HEADER_LEN}
_HEADER_PRESENT = {h: (lambda h: lambda rec: _CARRIED[h][rec["opcode"]] & _flag(rec, R.F_BTH))(h)
                   for h in _CARRIED}
_HEADER_PRESENT.update({
    "bth": lambda rec: _flag(rec, R.F_BTH),
    "mad": lambda rec: _flag(rec, R.F_MAD),
    "grh": lambda rec: _flag(rec, R.F_GRH) & np.isin(rec["link"], (R.ROCE1, R.IBGRH)),
    "lrh": lambda rec: np.isin(rec["link"], (R.IB, R.IBGRH)),
    "ip": lambda rec: rec["link"] == R.ROCE2V4, "ipv6": lambda rec: rec["link"] == R.ROCE2V6,
    "udp": lambda rec: np.isin(rec["link"], (R.ROCE2V4, R.ROCE2V6)),
    "eth": lambda rec: rec["eth_src"] != np.void(b"\0" * 6),
    "vlan": lambda rec: rec["vlan"] >= 0,
    "frame": lambda rec: np.ones(len(rec), bool), "icrc": lambda rec: rec["icrc"] != R.ABSENT,
    "vcrc": lambda rec: rec["vcrc"] != R.ABSENT, "link": lambda rec: np.ones(len(rec), bool),
    "payload": lambda rec: _flag(rec, R.F_BTH), "addr": lambda rec: np.ones(len(rec), bool),
})
_ALIASES = {"ip.src": "src", "ip.dst": "dst", "ipv6.src": "src", "ipv6.dst": "dst", "grh.sgid": "src",
            "grh.dgid": "dst", "ip.addr": ("src", "dst"), "ipv6.addr": ("src", "dst"), "lrh.lid": ("slid", "dlid"),
            "ip.dsfield.ecn": "ecn", "ipv6.tclass.ecn": "ecn", "aeth.syndrome.opcode": None}
_ENUM = {"icrc": R.CRC_STATUS, "vcrc": R.CRC_STATUS, "link": R.LINK_KINDS}


def _flag(rec, bit):
    return (rec["flags"] & bit) > 0


def _present(key: str) -> Callable:
    proto = key.split(".")[0]
    if proto not in _HEADER_PRESENT:
        raise UserError(f"display filter: '{key}' is not a field the fast path records "
                        f"(try one of: {', '.join(sorted(R.KEY_FIELDS))})")
    return _HEADER_PRESENT[proto]


def _addr16(v) -> bytes:
    a = ipaddress.ip_address(str(v))
    return (b"\0" * 10 + b"\xff\xff" + a.packed) if a.version == 4 else a.packed


def _column(key: str, want):
    """(function rec -> values, literal converted to match) for a field key."""
    proto = key.split(".")[0]
    col = _ALIASES.get(key, R.KEY_FIELDS.get(key))
    if key.endswith(".status") and proto in _ENUM or key == "link.kind":
        names = _ENUM[proto]
        if isinstance(want, str) and want not in names:
            raise UserError(f"display filter: {key} is one of {', '.join(names)}")
        return (lambda rec: rec[proto if proto != "link" else "link"]), (names.index(want) if isinstance(want, str) else want)
    if col is None:
        raise UserError(f"display filter: the fast path does not record '{key}'")
    cols = col if isinstance(col, tuple) else (col,)
    if R.RECORD[cols[0]].kind == "V":
        try:
            want = np.void(_addr16(want)) if R.RECORD[cols[0]].itemsize == 16 else np.void(bytes.fromhex(
                str(want).replace(":", "").replace("-", "")))
        except ValueError:
            raise UserError(f"display filter: {want!r} is not an address") from None
    elif isinstance(want, bool):
        want = int(want)
    elif not isinstance(want, (int, float)):
        raise UserError(f"display filter: {key} needs a number, not {want!r}")
    return (lambda rec: [rec[c] for c in cols]), want


class BatchFilter(Filter):
    """Compile once; call with a record batch to get a boolean mask."""

    def __call__(self, rec: np.ndarray) -> np.ndarray:
        return np.asarray(self.fn(rec), bool) & np.ones(len(rec), bool)

    @staticmethod
    def either(a, b):
        return lambda r: a(r) | b(r)

    @staticmethod
    def both(a, b):
        return lambda r: a(r) & b(r)

    @staticmethod
    def negate(a):
        return lambda r: ~a(r)

    def compare(self, key, op, want):
        present = _present(key)
        get, want = _column(key, want)
        return lambda r: present(r) & _any(op, get(r), want)

    def member(self, key, values):
        present = _present(key)
        tests = [_column(key, v) for v in values]
        return lambda r: present(r) & np.logical_or.reduce([_any(OPERATORS["=="], g(r), w) for g, w in tests])

    def contains(self, key, want):
        raise UserError("display filter: 'contains' needs the detail path (ibwire decode -Y)")

    def present(self, key):
        return _present(key)


def _any(op, values, want):
    if isinstance(values, list):
        out = op(values[0], want)
        for v in values[1:]:
            out = out | op(v, want)
        return out
    return op(values, want)


def compile_batch_filter(text: str) -> BatchFilter:
    return BatchFilter(text)
