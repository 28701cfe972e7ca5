"""Display filters in Wireshark's language, with tshark 4.0's rules, over Wireshark's field names.

`bth.p_key == 0x8001 && lrh.slid == 4`, `udp.port == 4791`, `ip.src == 10.0.0.0/8`, `infiniband`,
`bth.opcode in {0..5, 17}`, `eth.src contains 02:00`, `frame.protocols`-free, `icrc.status == "bad"`.

Rules (Wireshark's wireshark-filter(4) manual page, checked against tshark 4.0):
- a field that does not exist is an error (naming the closest known one), as is a literal its type cannot
  hold (`ip.src == "x"`); the `infiniband.` prefix is optional;
- a field may occur several times in a frame (`ip.addr`, `udp.port`, `eth.addr`): `==`, `<`, `in`,
  `contains`, `matches` hold when any occurrence does, `!=` when every occurrence differs (`~=` / `!==`:
  when any does), `===` when every occurrence equals; a test on an absent field is false; two fields compare
  every pair of their occurrences (`!=` and `===`: every pair, the others: any); a comparison after `any`
  holds when one occurrence does, after `all` when every one does (`all f in {a, b}`: all are a, or all b);
- `and`/`&&` binds tighter than `or`/`||`; `not`/`!`; sets `{a, b, c..d}` with commas; CIDR
  `ip.src == 10.0.0.0/8`; `matches`/`~` is a case-insensitive regular expression, `contains` exact.

A filter parses once into a tree of `Test` and logic nodes; `Filter.__call__(flat)` evaluates it on one
decoded frame's field map (ibwire.decode), `ibwire.decode.record_filter` on whole record batches.
"""

import difflib
import ipaddress
import re
from typing import Callable, List, NamedTuple, Optional, Set

from ibwire.decode.docfields import UNFILTERED
from ibwire.decode.extents import SLICEABLE
from ibwire.decode.fieldtypes import (
    BYTES,
    FLOAT,
    INT,
    IPV4,
    IPV6,
    MAC,
    PROTO,
    STRING,
    UINT,
    field_type,
    known_names,
    max_value,
)
from ibwire.decode.flagbits import DERIVED, derived
from ibwire.errors import UserError

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*")|
    (?P<op>===|!==|==|!=|~=|<=|>=|<|>|&&|&|\|\||!|~|\(|\)|\{|\}|\[|\]|,)|
    (?P<word>[A-Za-z0-9_.:\-/]+)
)""",
    re.X,
)

ANY_EQ, ALL_NE, ANY_NE, ALL_EQ, GT, LT, GE, LE = "==", "!=", "~=", "===", ">", "<", ">=", "<="
CONTAINS, MATCHES, IN = "contains", "matches", "in"
_OPS = {
    "==": ANY_EQ,
    "eq": ANY_EQ,
    "any_eq": ANY_EQ,
    "!=": ALL_NE,
    "ne": ALL_NE,
    "all_ne": ALL_NE,
    "~=": ANY_NE,
    "!==": ANY_NE,
    "any_ne": ANY_NE,
    "===": ALL_EQ,
    "all_eq": ALL_EQ,
    ">": GT,
    "gt": GT,
    "<": LT,
    "lt": LT,
    ">=": GE,
    "ge": GE,
    "<=": LE,
    "le": LE,
    "contains": CONTAINS,
    "matches": MATCHES,
    "~": MATCHES,
}
ORDERED = {GT: lambda a, b: a > b, LT: lambda a, b: a < b, GE: lambda a, b: a >= b, LE: lambda a, b: a <= b}


def field_name(name: str) -> str:
    """A user's field name without Wireshark's `infiniband.` prefix."""
    return name[len("infiniband.") :] if name.startswith("infiniband.") else name


# ---- the tree ----------------------------------------------------------------------------------------


class Test(NamedTuple):
    """`field op value`: value is a typed literal (int, float, str, bytes, ip address or network), a
    tuple of them for `in` (a range as a (lo, hi) pair inside a list), a compiled regex for matches,
    or a Field for field-to-field comparisons; op None tests presence (with `xform`: a non-empty slice,
    a non-zero `&`).  `xform` (Slice, Length, BitAnd) turns the field's values, of type `base`, into
    values of `type`."""

    field: str
    type: str
    op: Optional[str]
    value: object = None
    xform: tuple = ()
    base: Optional[str] = None


class Field(NamedTuple):
    name: str
    type: Optional[str] = None
    xform: tuple = ()


class Slice(NamedTuple):
    """`[0:2]`, `[1-3]`, `[-2:]`, `[:4]`, `[2]`, `[0:2,4]`: (start, kind, n) per range, kind "len", "end"
    (an inclusive end offset) or "rest"."""

    ranges: tuple


class Length(NamedTuple):
    """`len(field)`: the length in bytes of each occurrence."""


class BitAnd(NamedTuple):
    """`field & mask`: mask a literal of the field's type or a Field."""

    mask: object


class Logic(NamedTuple):
    kind: str  # "and", "or", "not"; "all": its one Test (contains, matches) holds for every occurrence
    args: tuple


class Range(NamedTuple):
    lo: object
    hi: object


# ---- literals ----------------------------------------------------------------------------------------

_HEXBYTES = re.compile(r"[0-9a-fA-F]{2}([:\-.]?[0-9a-fA-F]{2})*")


def _int(tok: str, signed: bool):
    t = tok.lower()
    neg = t.startswith("-")
    body = t[1:] if neg else t
    try:
        if body.startswith(("0x", "0b")):
            v = int(body, 0)
        elif len(body) > 1 and body.startswith("0") and body.isdigit():
            v = int(body, 8)  # C-style octal, as Wireshark reads it
        elif body in ("true", "false"):
            v = int(body == "true")
        else:
            v = int(body, 10)
    except ValueError:
        return None
    if neg and not signed:
        return None
    return -v if neg else v


def _bytes(tok: str) -> Optional[bytes]:
    if tok.startswith('"'):
        return _unquote(tok).encode()
    if len(tok) == 4 and tok[:2].lower() == "0x":  # a one-byte hex number (epan bytes_from_literal)
        tok = tok[2:]
    if len(tok) == 1 and tok in "0123456789abcdefABCDEF":
        return bytes([int(tok, 16)])
    if _HEXBYTES.fullmatch(tok):
        return bytes.fromhex(re.sub(r"[:\-.]", "", tok))
    return None


def _unquote(tok: str) -> str:
    return tok[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")


def literal(ftype: str, tok: str, key: str, op: str):
    """The typed value of literal `tok` for a field of type `ftype`, or a UserError as tshark words it."""
    quoted = tok.startswith('"')
    if ftype in (UINT, INT):
        v = None if quoted else _int(tok, ftype == INT)
        if v is None:
            raise UserError(f"display filter: {tok!r} is not a valid number for {key}")
        top = max_value(key) if key else None
        if top is not None and v > top:
            raise UserError(f"display filter: {tok} is too big for {key}, maximum {top}")
        return v
    if ftype == FLOAT:
        try:
            return float(tok)
        except ValueError:
            raise UserError(f"display filter: {tok!r} is not a valid number for {key}") from None
    if ftype == STRING:
        return _unquote(tok) if quoted else tok
    if ftype in (IPV4, IPV6):
        text = _unquote(tok) if quoted else tok
        try:
            if "/" in text:
                net = ipaddress.ip_network(text, strict=False)
                if net.version != (4 if ftype == IPV4 else 6):
                    raise ValueError
                return net
            addr = ipaddress.ip_address(text)
            if addr.version != (4 if ftype == IPV4 else 6):
                raise ValueError
            return addr
        except ValueError:
            kind = "IPv4" if ftype == IPV4 else "IPv6"
            raise UserError(f"display filter: {key} is an {kind} address; {tok!r} is not one") from None
    if ftype in (MAC, BYTES, PROTO):
        v = None if quoted and ftype == MAC else _bytes(tok)
        if v is None or (ftype == MAC and op != CONTAINS and len(v) != 6):
            raise UserError(f"display filter: {key} holds bytes; {tok!r} is not a byte string such as 00:1b:21")
        return v
    raise UserError(f"display filter: {key} cannot be compared")


def kind(key: str) -> Optional[str]:
    """A field's type for the filter: the registry's (ibwire.decode.fieldtypes), or a flag bit's (flagbits)."""
    return field_type(key) or (UINT if key in DERIVED else None)


def closest(name: str) -> str:
    names = known_names() + sorted(DERIVED)
    best = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if not best:
        proto = name.split(".")[0]
        best = sorted(n for n in names if n.startswith(proto + ".")) or sorted(n for n in names if "." not in n)
    return best[0] if best else ""


# ---- parsing -----------------------------------------------------------------------------------------


def _tokenize(text: str) -> List[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UserError(f"display filter: cannot read {text[pos:]!r}")
        out.append(m.group(m.lastgroup))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0
        self.fields: Set[str] = set()

    def peek(self, ahead=0):
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def take(self, expected=None):
        tok = self.peek()
        if tok is None:
            raise UserError(
                f"display filter: unexpected end of {self.text!r}" + (f" (expected '{expected}')" if expected else "")
            )
        if expected and tok != expected:
            raise UserError(f"display filter: expected '{expected}', not '{tok}', in {self.text!r}")
        self.pos += 1
        return tok

    def parse(self):
        if not self.tokens:
            raise UserError("the display filter is empty")
        tree = self.or_()
        if self.pos != len(self.tokens):
            raise UserError(f"display filter: '{self.tokens[self.pos]}' was unexpected in {self.text!r}")
        return tree

    def _chain(self, kind: str, words, operand):
        """One precedence level: operands joined by `kind`'s words (`or`/`||`, `and`/`&&`)."""
        args = [operand()]
        while self.peek() in words:
            self.take()
            args.append(operand())
        return args[0] if len(args) == 1 else Logic(kind, tuple(args))

    def or_(self):
        return self._chain("or", ("or", "||"), self.and_)

    def and_(self):
        return self._chain("and", ("and", "&&"), self.not_)

    def not_(self):
        if self.peek() in ("not", "!"):
            self.take()
            return Logic("not", (self.not_(),))
        if self.peek() == "(":
            self.take()
            inner = self.or_()
            self.take(")")
            return inner
        return self.test()

    def field(self, tok: str) -> Optional[str]:
        key = field_name(tok)
        return key if kind(key) is not None else None

    def test(self):
        tok = self.take()
        if tok in ("all", "any") and self.peek() not in (None, *_OPS, ")", "&&", "||", "and", "or", "in"):
            return self.quantified(tok)
        if tok in _OPS or tok in ("(", ")", "{", "}", ",", "and", "or", "&&", "||", "&") or tok.startswith('"'):
            raise UserError(f"display filter: '{tok}' was unexpected in {self.text!r}")
        if tok == "len" and self.peek() == "(":
            key, ftype, base, xform = self.length()
        else:
            key, ftype, base, xform = self.operand(tok)
        while self.peek() in ("&", "bitwise_and"):
            self.take()
            xform += (self.bitand(key, ftype, self.take()),)
        shown = self.text if xform else key
        nxt = self.peek()
        if nxt == "in" or (nxt == "not" and self.peek(1) == "in"):
            if xform:
                raise UserError(f"display filter: only a field may be tested for membership in a set, not {shown!r}")
            if nxt == "not":
                self.take()
                return Logic("not", (self.member(key, ftype),))
            return self.member(key, ftype)
        if nxt not in _OPS:
            if xform and isinstance(xform[-1], Length):
                raise UserError(f"display filter: len() gives a number; compare it, as in 'len({key}) > 100'")
            return Test(key, ftype, None, None, xform, base)
        op = _OPS[self.take()]
        if key in UNFILTERED:
            raise UserError(f"display filter: {key} is an absolute time, which ibwire does not compare yet")
        if xform and isinstance(xform[-1], BitAnd) and op in (CONTAINS, MATCHES):
            raise UserError(f"display filter: '{op}' cannot follow '&' in {self.text!r}")
        rhs = self.take()
        if op == MATCHES:
            if ftype not in (STRING, BYTES, PROTO, MAC):
                raise UserError(f"display filter: {key} cannot take part in a 'matches' comparison")
            if not rhs.startswith('"'):
                raise UserError(f"display filter: 'matches' needs a quoted regular expression, not {rhs!r}")
            try:
                return Test(key, ftype, op, re.compile(_unquote(rhs), re.I | re.S), xform, base)
            except re.error as e:
                raise UserError(f"display filter: bad regular expression {rhs}: {e}") from None
        if op == CONTAINS:
            if ftype not in (STRING, BYTES, PROTO, MAC):
                raise UserError(f"display filter: {key} cannot take part in a 'contains' comparison")
            return Test(key, ftype, op, literal(ftype, rhs, key, op), xform, base)
        if ftype == PROTO:
            raise UserError(f"display filter: {key} is a protocol; compare one of its fields instead")
        other = self.field(rhs)
        if other is not None and not _looks_literal(ftype, rhs):
            okey, otype, obase, oxform = self.operand(rhs)
            if (xform or oxform) and (ftype == BYTES) != (otype == BYTES) and not _bytes_like(ftype, otype):
                raise UserError(f"display filter: {rhs} cannot be compared with {key}")
            return Test(key, ftype, op, Field(okey, obase, oxform), xform, base)
        value = literal(ftype, rhs, key if not xform else "", op)
        if op in ORDERED and isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            raise UserError(f"display filter: a network ({rhs}) can only be compared with == or !=")
        return Test(key, ftype, op, value, xform, base)

    def quantified(self, quant: str):
        """`all`/`any` and the comparison after it, as tshark 4.0 reads them (dfilter's quantifiers)."""
        node = self.test()
        if isinstance(node, Logic):  # `not in`: the quantifier changes nothing
            return node
        if node.op is None:
            raise UserError(f"display filter: '{quant}' needs a comparison after it, as in '{quant} udp.port > 1024'")
        if quant == "any":
            return node._replace(op={ALL_NE: ANY_NE, ALL_EQ: ANY_EQ}.get(node.op, node.op))
        if node.op in (ANY_EQ, ALL_EQ, ALL_NE, ANY_NE):
            return node._replace(op=ALL_EQ if node.op in (ANY_EQ, ALL_EQ) else ALL_NE)
        if node.op in ORDERED:  # every occurrence (pair): none fails
            return _every(node, node._replace(op=_NEGATED[node.op]))
        if node.op == IN:  # every occurrence equal to one member, or in one range
            return Logic("or", tuple(_all_in(node, w) for w in node.value))
        return Logic("all", (node,))  # contains, matches (the records hold them once a frame: any is all)

    def operand(self, tok: str):
        """A field and the slices after it: (key, type of the values, the field's own type, xform)."""
        key = self.field(tok)
        if key is None:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*", tok):
                if field_name(tok).startswith("_ws.col."):
                    raise UserError(
                        f"display filter: '{tok}' is a column, not a field; tshark 4.0 cannot "
                        f"filter on columns either (filter on the fields they show: bth.opcode …)"
                    )
                hint = closest(field_name(tok))
                raise UserError(
                    f"display filter: '{tok}' is not a field" + (f"; did you mean '{hint}'?" if hint else "")
                )
            raise UserError(f"display filter: the left side of a comparison must be a field, not '{tok}'")
        self.fields.add(key)
        base = ftype = kind(key)
        xform = ()
        while self.peek() == "[":
            _sliceable(key, ftype)
            xform += (self.slice(),)
            ftype = BYTES
        return key, ftype, base, xform

    def length(self):
        """`len(field)`, as tshark 4.0 takes it: the argument is a field, unsliced."""
        self.take("(")
        tok = self.take()
        key = self.field(tok)
        if key is None or self.peek() != ")":
            if key is None and not tok.startswith('"') and re.fullmatch(r"[A-Za-z_][\w\-.]*", tok):
                self.operand(tok)  # a misspelt field: say which
            raise UserError(f"display filter: only fields can be used as parameter for len(), in {self.text!r}")
        self.take(")")
        self.fields.add(key)
        ftype = kind(key)
        if ftype not in (BYTES, MAC, IPV4, IPV6, STRING) and not (ftype == PROTO and key in SLICEABLE):
            raise UserError(
                f"display filter: ibwire takes len() of byte, address and text fields and of the "
                f"frame, its protocols and IB headers, not of {key}"
            )
        return key, UINT, ftype, (Length(),)

    def slice(self) -> Slice:
        """`[...]` after a field: ranges separated by commas, as wireshark-filter(4) writes them."""
        self.take("[")
        parts, cur = [], ""
        while self.peek() != "]":
            tok = self.take("]") if self.peek() is None else self.take()
            if tok == ",":
                parts.append(cur)
                cur = ""
            else:
                cur += tok
        self.take("]")
        parts.append(cur)
        return Slice(tuple(_range(p) for p in parts))

    def bitand(self, key: str, ftype: str, tok: str) -> BitAnd:
        """The mask after `&`: a literal of the field's type (tshark's range checks) or a field."""
        if ftype not in (UINT, INT, BYTES, MAC, IPV4, IPV6):
            raise UserError(f"display filter: {key} is {_KIND.get(ftype, 'a ' + ftype)} and cannot take '&'")
        other = self.field(tok)
        if other is not None and not _looks_literal(ftype, tok):
            okey, otype, obase, oxform = self.operand(tok)
            if otype != ftype:
                raise UserError(f"display filter: {okey} cannot mask {key}")
            return BitAnd(Field(okey, obase, oxform))
        if ftype in (UINT, INT):
            v = None if tok.startswith('"') else _int(tok, True)
            if v is None:
                raise UserError(f"display filter: {tok!r} is not a valid arithmetic operand")
            top = max_value(key)
            if top is not None and v > top:
                raise UserError(f"display filter: {tok} is too big for {key}, maximum {top}")
            return BitAnd(v)
        v = literal(ftype, tok, key, ANY_EQ)
        if isinstance(v, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            raise UserError(f"display filter: the mask after '&' must be an address, not the network {tok}")
        return BitAnd(v)

    def member(self, key, ftype):
        self.take("in")
        self.take("{")
        values = []
        while self.peek() != "}":
            tok = self.take()
            if self.peek() == "..":
                self.take()
                tok = tok + ".." + self.take()
            if ".." in tok and ftype in (UINT, INT, FLOAT):
                lo, _, hi = tok.partition("..")
                values.append(Range(literal(ftype, lo, key, IN), literal(ftype, hi, key, IN)))
            else:
                values.append(literal(ftype, tok, key, IN))
            if self.peek() == ",":
                self.take()
            elif self.peek() != "}":
                raise UserError(
                    f"display filter: '{self.peek() or 'end'}' was unexpected in a set; "
                    f"separate members with commas: {self.text!r}"
                )
        self.take("}")
        if not values:
            raise UserError(f"display filter: the set after '{key} in' is empty")
        return Test(key, ftype, IN, tuple(values))


_NEGATED = {GT: LE, LE: GT, LT: GE, GE: LT}


def _present(node: Test):
    """The test's field (and the field it is compared with) present in the frame."""
    tests = [Test(node.field, kind(node.field), None)]
    if isinstance(node.value, Field):
        tests.append(Test(node.value.name, kind(node.value.name), None))
    return tests[0] if len(tests) == 1 else Logic("and", tuple(tests))


def _every(node: Test, failing: Test):
    return Logic("and", (_present(node), Logic("not", (failing,))))


def _all_in(node: Test, member):
    """`all field in {…}`'s test of one member: every occurrence equals it, or lies in its range."""
    if not isinstance(member, Range):
        return node._replace(op=ALL_EQ, value=member)
    low, high = node._replace(op=LT, value=member.lo), node._replace(op=GT, value=member.hi)
    return Logic("and", (_present(node), Logic("not", (low,)), Logic("not", (high,))))


def _looks_literal(ftype: str, tok: str) -> bool:
    try:
        literal(ftype, tok, "", ANY_EQ)
        return True
    except UserError:
        return False


_KIND = {
    UINT: "an unsigned integer",
    INT: "a signed integer",
    FLOAT: "a number or time",
    STRING: "a string",
    PROTO: "a protocol",
}


def _sliceable(key: str, ftype: str) -> None:
    """tshark 4.0 slices bytes, addresses, strings and protocols; numbers and times it refuses."""
    if ftype in (UINT, INT, FLOAT):
        raise UserError(f"display filter: {key} is {_KIND[ftype]} and cannot be sliced into a sequence of bytes")
    if ftype == PROTO and key not in SLICEABLE:
        raise UserError(
            f"display filter: ibwire slices the frame, eth, vlan, ip, ipv6, udp, infiniband and the IB "
            f"headers (lrh, grh, bth, the extended headers, mad, payload), not {key}"
        )


def _range(text: str) -> tuple:
    """One range of a slice as (start, kind, n), refused as tshark 4.0 refuses it (dfilter drange)."""
    num = r"-?(?:0[xX][0-9a-fA-F]+|[1-9]\d*|0[0-7]*)"
    m = re.fullmatch(rf"({num})?(?::({num})?)?", text)
    if text and m and (m.group(1) is not None or ":" in text):
        start = _int(m.group(1), True) if m.group(1) is not None else 0
        if ":" not in text:
            return start, "len", 1
        if m.group(2) is None:
            return start, "rest", 0
        n = _int(m.group(2), True)
        if n <= 0:
            raise UserError(f"display filter: range {text} isn't valid because length {n} isn't positive")
        return start, "len", n
    m = re.fullmatch(rf"({num})-({num})", text)
    if m:
        a, b = _int(m.group(1), True), _int(m.group(2), True)
        if (a < 0) == (b < 0) and a >= b:
            raise UserError(f"display filter: range {text} isn't valid because {a} is greater or equal than {b}")
        return a, "end", b
    raise UserError(f"display filter: {text!r} is not a valid range" if text else "display filter: an empty slice []")


def _bytes_like(a: str, b: str) -> bool:
    return {a, b} <= {BYTES, MAC, IPV4, IPV6, STRING}


# ---- evaluation on one frame -------------------------------------------------------------------------


def typed(ftype: str, value):
    """A decoded field value (ibwire.decode's flat map) in the filter's terms; None when it does not fit."""
    try:
        if ftype in (UINT, INT):
            return int(value) if not isinstance(value, str) else int(value, 16)
        if ftype == FLOAT:
            return float(value)
        if ftype in (IPV4, IPV6):
            return ipaddress.ip_address(value)
        if ftype in (MAC, BYTES):
            if isinstance(value, (bytes, bytearray)):
                return bytes(value)
            return bytes.fromhex(re.sub(r"[:\-.]", "", str(value)))
        if ftype == STRING:
            return str(value)
    except (TypeError, ValueError):
        return None
    return value


def equal(ftype: str, have, want) -> bool:
    if isinstance(want, Range):
        return want.lo <= have <= want.hi
    if isinstance(want, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return have.version == want.version and have in want
    if ftype == FLOAT:
        return abs(have - want) < 1e-9
    return have == want


def _contains(have, want) -> bool:
    if isinstance(have, str):
        return (want.decode("utf-8", "replace") if isinstance(want, bytes) else str(want)) in have
    return want in have


def _matches(have, rx) -> bool:
    text = have.decode("latin-1") if isinstance(have, bytes) else str(have)
    return rx.search(text) is not None


def compare(op, ftype, values: list, want) -> bool:
    """tshark's semantics of `op` over every occurrence of a field (values non-empty)."""
    if op == ANY_EQ:
        return any(equal(ftype, v, want) for v in values)
    if op == ALL_NE:
        return not any(equal(ftype, v, want) for v in values)
    if op == ANY_NE:
        return not all(equal(ftype, v, want) for v in values)
    if op == ALL_EQ:
        return all(equal(ftype, v, want) for v in values)
    if op in ORDERED:
        f = ORDERED[op]
        if ftype in (BYTES, MAC):  # shorter first, then byte by byte (ftype-bytes.c cmp_order)
            values, want = [(len(v), v) for v in values], (len(want), want)
        try:
            return any(f(v, want) for v in values)
        except TypeError:
            return False
    if op == IN:
        return any(equal(ftype, v, w) for v in values for w in want)
    if op == CONTAINS:
        return any(_contains(v, want) for v in values)
    if op == MATCHES:
        return any(_matches(v, want) for v in values)
    raise AssertionError(op)


def occurrences(flat: dict, key: str, ftype: str) -> list:
    """Every value of `key` in a decoded frame's field map, typed; [] when absent."""
    v = flat.get(key)
    if v is None:
        return derived(flat, key) if key in DERIVED else []
    vals = v if isinstance(v, list) else [v]
    out = [typed(ftype, x) for x in vals]
    return [x for x in out if x is not None]


class Filter:
    """A compiled display filter; call it with a decoded frame's flat field map."""

    def __init__(self, text: str):
        self.text = text
        p = _Parser(text)
        self.tree = p.parse()
        self.fields: Set[str] = p.fields

    def __call__(self, flat: dict) -> bool:
        return self._eval(self.tree, flat)

    def _eval(self, node, flat) -> bool:
        if isinstance(node, Logic):
            if node.kind == "and":
                return all(self._eval(a, flat) for a in node.args)
            if node.kind == "or":
                return any(self._eval(a, flat) for a in node.args)
            if node.kind == "all":
                test = node.args[0]
                values = operand_values(flat, test.field, test.base, test.type, test.xform)
                return bool(values) and all(compare(test.op, test.type, [v], test.value) for v in values)
            return not self._eval(node.args[0], flat)
        if node.op is None and not node.xform:
            if node.field in flat:
                return flat[node.field] is not None
            return node.field in DERIVED and bool(derived(flat, node.field))
        values = operand_values(flat, node.field, node.base, node.type, node.xform)
        if node.op is None:  # a slice holding bytes, a mask leaving a bit set
            if isinstance(node.xform[-1], Slice):
                return any(len(v) for v in values)
            return any(_truthy(v) for v in values)
        if not values:
            return False
        want = node.value
        if isinstance(want, Field):
            theirs = operand_values(flat, want.name, want.type, node.type, want.xform)
            pairs = (compare(node.op, node.type, [v], w) for v in values for w in theirs)
            return bool(theirs) and (all(pairs) if node.op in (ALL_NE, ALL_EQ) else any(pairs))
        return compare(node.op, node.type, values, want)


def as_bytes(ftype: str, v) -> bytes:
    """A typed value's bytes, as tshark slices it: addresses packed, strings in UTF-8."""
    if isinstance(v, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return v.packed
    return v.encode() if isinstance(v, str) else bytes(v)


def take_slice(data: bytes, ranges) -> bytes:
    """The bytes a slice takes, as epan/ftypes/ftypes.c slice_func does: a range that falls outside the
    value ends the slice, keeping the bytes already taken."""
    out, n = b"", len(data)
    for start, kind, k in ranges:
        s = start + n if start < 0 else start
        if s < 0:
            break
        if kind == "rest":
            length = n - s
            if length <= 0:
                break
        elif kind == "len":
            length = k
            if s + length > n:
                break
        else:
            end = k + n if k < 0 else k
            if (k < 0 and end < s) or (k >= 0 and end >= n):
                break
            length = end - s + 1
        out += data[s : s + length]
    return out


def _and(a, b):
    if isinstance(a, bytes):
        return bytes(x & y for x, y in zip(a, b))
    if isinstance(a, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return type(a)(int(a) & int(b))
    return a & b


def _truthy(v) -> bool:
    if isinstance(v, bytes):
        return any(v)
    return int(v) != 0


def operand_values(flat: dict, key: str, base: str, ftype: str, xform: tuple) -> list:
    """Every value of `key` in a decoded frame, turned by its slices, len() and masks, typed `ftype`."""
    if not xform:
        if ftype == BYTES and base not in (None, BYTES, PROTO):
            return [as_bytes(base, v) for v in occurrences(flat, key, base)]
        return occurrences(flat, key, ftype)
    if base == PROTO:
        raw = flat.get("_ws.bytes")
        values = raw.of(key) if raw is not None else []
    else:
        values = occurrences(flat, key, base)
    for x in xform:
        if isinstance(x, Slice):
            values = [take_slice(as_bytes(base, v), x.ranges) for v in values]
        elif isinstance(x, Length):
            values = [len(as_bytes(base, v)) for v in values]
        else:
            masks = (
                operand_values(flat, x.mask.name, x.mask.type, ftype, x.mask.xform)
                if isinstance(x.mask, Field)
                else [x.mask]
            )
            values = [_and(v, m) for v in values for m in masks]
    return values


def compile_filter(text: str) -> Filter:
    return Filter(text)


def walk(node) -> Callable:
    """Every Test in a tree, depth first."""
    if isinstance(node, Logic):
        for a in node.args:
            yield from walk(a)
    else:
        yield node
