"""Display filters over Wireshark field names: `bth.p_key == 0x8001 and lrh.slid == 4`,
`reth.dmalen > 4096`, `bth.opcode in {10, 12}`, `icrc.status == "bad"`, `not aeth`, `ip.src == 10.0.0.1`.

Operators: == != < > <= >= (and eq ne lt gt le ge), `in {…}`, `contains`; `and`/`&&`, `or`/`||`,
`not`/`!`, parentheses; a bare field name tests presence.  The `infiniband.` prefix is accepted.  A
filter compiles once into a predicate over a record's flat field map; `Filter.fields` lists the
names it reads, so bulk readers can fetch only those.
"""
import ipaddress
import operator
import re
from typing import Callable, List, Set

from .errors import UserError

_TOKEN = re.compile(r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*")|
    (?P<op>==|!=|<=|>=|<|>|&&|\|\||!|\(|\)|\{|\}|,)|
    (?P<word>[A-Za-z0-9_.:\-/]+)
)""", re.X)
OPERATORS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt, "<=": operator.le,
        ">=": operator.ge, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "gt": operator.gt,
        "le": operator.le, "ge": operator.ge}


def field_name(name: str) -> str:
    return name[len("infiniband."):] if name.startswith("infiniband.") else name


def literal(tok: str):
    if tok.startswith('"'):
        return tok[1:-1].encode().decode("unicode_escape")
    low = tok.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(tok, 0)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        pass
    return tok


def _norm(value):
    """Make field values and literals comparable: addresses canonical, hex bytes without colons."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
        if re.fullmatch(r"([0-9a-fA-F]{2}[:\-])+[0-9a-fA-F]{2}", value):
            return value.replace(":", "").replace("-", "").lower()
        return value
    return value


def _compare(op, have, want):
    have, want = _norm(have), _norm(want)
    if isinstance(have, str) and isinstance(want, int) and op in (operator.eq, operator.ne):
        want = str(want)
    try:
        return op(have, want)
    except TypeError:
        return False


class Filter:
    """A compiled display filter; call it with a flat field map."""

    def __init__(self, text: str):
        self.text = text
        self.fields: Set[str] = set()
        self.tokens = self._tokenize(text)
        self.pos = 0
        if not self.tokens:
            raise UserError("the display filter is empty")
        self.fn = self._or()
        if self.pos != len(self.tokens):
            raise UserError(f"display filter: unexpected '{self.tokens[self.pos]}' in {text!r}")

    def __call__(self, flat: dict) -> bool:
        return bool(self.fn(flat))

    @staticmethod
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

    def _peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, expected=None):
        tok = self._peek()
        if tok is None or (expected and tok != expected):
            raise UserError(f"display filter: expected {expected or 'more'} in {self.text!r}")
        self.pos += 1
        return tok

    def _or(self) -> Callable:
        left = self._and()
        while self._peek() in ("or", "||"):
            self._take()
            left = self.either(left, self._and())
        return left

    def _and(self) -> Callable:
        left = self._not()
        while self._peek() in ("and", "&&"):
            self._take()
            left = self.both(left, self._not())
        return left

    def _not(self) -> Callable:
        if self._peek() in ("not", "!"):
            self._take()
            return self.negate(self._not())
        if self._peek() == "(":
            self._take()
            inner = self._or()
            self._take(")")
            return inner
        return self._comparison()

    def _comparison(self) -> Callable:
        name = self._take()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", name):
            raise UserError(f"display filter: '{name}' is not a field name")
        key = field_name(name)
        self.fields.add(key)
        tok = self._peek()
        if tok in OPERATORS:
            op = OPERATORS[self._take()]
            return self.compare(key, op, literal(self._take()))
        if tok == "in":
            self._take()
            self._take("{")
            values = []
            while self._peek() != "}":
                values.append(literal(self._take()))
                if self._peek() == ",":
                    self._take()
            self._take("}")
            return self.member(key, values)
        if tok == "contains":
            self._take()
            return self.contains(key, literal(self._take()))
        return self.present(key)

    # How an expression is evaluated, one hook per construct: here over one packet's flat field map;
    # ibwire.fast.filter overrides them to evaluate whole record batches with numpy.
    @staticmethod
    def either(a, b):
        return lambda r: a(r) or b(r)

    @staticmethod
    def both(a, b):
        return lambda r: a(r) and b(r)

    @staticmethod
    def negate(a):
        return lambda r: not a(r)

    def compare(self, key, op, want):
        return lambda r: key in r and r[key] is not None and _compare(op, r[key], want)

    def member(self, key, values):
        values = [_norm(v) for v in values]
        return lambda r: key in r and _norm(r[key]) in values

    def contains(self, key, want):
        return lambda r: key in r and str(_norm(want)).lower() in str(_norm(r[key])).lower()

    def present(self, key):
        return lambda r: key in r or any(k.startswith(key + ".") for k in r)


def compile_filter(text: str) -> Filter:
    return Filter(text)
