"""Display filters in Wireshark's language, with tshark 4.0's rules, over Wireshark's field names.

`bth.p_key == 0x8001 && lrh.slid == 4`, `udp.port == 4791`, `ip.src == 10.0.0.0/8`, `infiniband`,
`bth.opcode in {0..5, 17}`, `eth.src contains 02:00`, `frame.protocols`-free, `icrc.status == "bad"`.

Rules (Wireshark's wireshark-filter(4) manual page, checked against tshark 4.0):
- a field that does not exist is an error (naming the closest known one), as is a literal its type cannot
  hold (`ip.src == "x"`); the `infiniband.` prefix is optional;
- a field may occur several times in a frame (`ip.addr`, `udp.port`, `eth.addr`): `==`, `<`, `in`,
  `contains`, `matches` hold when any occurrence does, `!=` when every occurrence differs (`~=` / `!==`:
  when any does), `===` when every occurrence equals; a test on an absent field is false;
- `and`/`&&` binds tighter than `or`/`||`; `not`/`!`; sets `{a, b, c..d}` with commas; CIDR
  `ip.src == 10.0.0.0/8`; `matches`/`~` is a case-insensitive regular expression, `contains` exact.

A filter parses once into a tree of `Test` and logic nodes; `Filter.__call__(flat)` evaluates it on one
decoded frame's field map (ibwire.decode), `ibwire.fast.filter` on whole record batches.
"""
import difflib
import ipaddress
import re
from typing import Callable, List, NamedTuple, Optional, Set

from .errors import UserError
from .fieldtypes import BYTES, FLOAT, INT, IPV4, IPV6, MAC, PROTO, STRING, UINT, field_type, known_names, max_value

_TOKEN = re.compile(r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*")|
    (?P<op>===|!==|==|!=|~=|<=|>=|<|>|&&|\|\||!|~|\(|\)|\{|\}|\[|\]|,)|
    (?P<word>[A-Za-z0-9_.:\-/]+)
)""", re.X)

ANY_EQ, ALL_NE, ANY_NE, ALL_EQ, GT, LT, GE, LE = "==", "!=", "~=", "===", ">", "<", ">=", "<="
CONTAINS, MATCHES, IN = "contains", "matches", "in"
_OPS = {"==": ANY_EQ, "eq": ANY_EQ, "any_eq": ANY_EQ, "!=": ALL_NE, "ne": ALL_NE, "all_ne": ALL_NE,
        "~=": ANY_NE, "!==": ANY_NE, "any_ne": ANY_NE, "===": ALL_EQ, "all_eq": ALL_EQ,
        ">": GT, "gt": GT, "<": LT, "lt": LT, ">=": GE, "ge": GE, "<=": LE, "le": LE,
        "contains": CONTAINS, "matches": MATCHES, "~": MATCHES}
ORDERED = {GT: lambda a, b: a > b, LT: lambda a, b: a < b, GE: lambda a, b: a >= b, LE: lambda a, b: a <= b}


def field_name(name: str) -> str:
    """A user's field name without Wireshark's `infiniband.` prefix."""
    return name[len("infiniband."):] if name.startswith("infiniband.") else name


# ---- the tree ----------------------------------------------------------------------------------------

class Test(NamedTuple):
    """`field op value`: value is a typed literal (int, float, str, bytes, ip address or network), a
    tuple of them for `in` (a range as a (lo, hi) pair inside a list), a compiled regex for matches,
    or a Field for field-to-field comparisons; op None tests presence."""
    field: str
    type: str
    op: Optional[str]
    value: object = None


class Field(NamedTuple):
    name: str


class Logic(NamedTuple):
    kind: str               # "and", "or", "not"
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
            v = int(body, 8)                        # C-style octal, as Wireshark reads it
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


def closest(name: str) -> str:
    names = known_names()
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
            raise UserError(f"display filter: unexpected end of {self.text!r}" +
                            (f" (expected '{expected}')" if expected else ""))
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
        return key if field_type(key) is not None else None

    def test(self):
        tok = self.take()
        if tok in _OPS or tok in ("(", ")", "{", "}", ",", "and", "or", "&&", "||") or tok.startswith('"'):
            raise UserError(f"display filter: '{tok}' was unexpected in {self.text!r}")
        key = self.field(tok)
        if key is None:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*", tok):
                hint = closest(field_name(tok))
                raise UserError(f"display filter: '{tok}' is not a field" + (f"; did you mean '{hint}'?" if hint else ""))
            raise UserError(f"display filter: the left side of a comparison must be a field, not '{tok}'")
        self.fields.add(key)
        ftype = field_type(key)
        nxt = self.peek()
        if nxt == "[":
            raise UserError("display filter: slices (field[a:b]) are not supported")
        if nxt == "not" and self.peek(1) == "in":
            self.take()
            return Logic("not", (self.member(key, ftype),))
        if nxt == "in":
            return self.member(key, ftype)
        if nxt not in _OPS:
            return Test(key, ftype, None)
        op = _OPS[self.take()]
        rhs = self.take()
        if op == MATCHES:
            if ftype not in (STRING, BYTES, PROTO, MAC):
                raise UserError(f"display filter: {key} cannot take part in a 'matches' comparison")
            if not rhs.startswith('"'):
                raise UserError(f"display filter: 'matches' needs a quoted regular expression, not {rhs!r}")
            try:
                return Test(key, ftype, op, re.compile(_unquote(rhs), re.I | re.S))
            except re.error as e:
                raise UserError(f"display filter: bad regular expression {rhs}: {e}") from None
        if op == CONTAINS:
            if ftype not in (STRING, BYTES, PROTO, MAC):
                raise UserError(f"display filter: {key} cannot take part in a 'contains' comparison")
            return Test(key, ftype, op, literal(ftype, rhs, key, op))
        if ftype == PROTO:
            raise UserError(f"display filter: {key} is a protocol; compare one of its fields instead")
        other = self.field(rhs)
        if other is not None and not _looks_literal(ftype, rhs):
            self.fields.add(other)
            return Test(key, ftype, op, Field(other))
        value = literal(ftype, rhs, key, op)
        if op in ORDERED and isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            raise UserError(f"display filter: a network ({rhs}) can only be compared with == or !=")
        return Test(key, ftype, op, value)

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
                raise UserError(f"display filter: '{self.peek() or 'end'}' was unexpected in a set; "
                                f"separate members with commas: {self.text!r}")
        self.take("}")
        if not values:
            raise UserError(f"display filter: the set after '{key} in' is empty")
        return Test(key, ftype, IN, tuple(values))


def _looks_literal(ftype: str, tok: str) -> bool:
    try:
        literal(ftype, tok, "", ANY_EQ)
        return True
    except UserError:
        return False


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
        return []
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
            return not self._eval(node.args[0], flat)
        if node.op is None:
            return node.field in flat and flat[node.field] is not None
        values = occurrences(flat, node.field, node.type)
        if not values:
            return False
        want = node.value
        if isinstance(want, Field):
            theirs = occurrences(flat, want.name, node.type)
            return bool(theirs) and any(compare(node.op, node.type, values, w) for w in theirs)
        return compare(node.op, node.type, values, want)


def compile_filter(text: str) -> Filter:
    return Filter(text)


def walk(node) -> Callable:
    """Every Test in a tree, depth first."""
    if isinstance(node, Logic):
        for a in node.args:
            yield from walk(a)
    else:
        yield node
