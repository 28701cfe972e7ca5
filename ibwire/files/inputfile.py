"""The files a user hands ibwire to configure it (tenants.toml, fabric state JSON, scenarios,
partitions.conf): read whole within a size limit, refused when nested deeper than any real one, and
checked key by key, so a misspelt key is an error at its line naming the closest key (difflib), never a
setting silently ignored."""

from __future__ import annotations

import difflib
import json
import re
import tomllib

from ibwire.errors import InputError, UserError

MAX_BYTES = 16 << 20  # a fabric JSON of 10,000 ports is about 8 MB; no configuration file comes near
MAX_DEPTH = 32  # the deepest real file (fabric JSON: traps -> details -> value) nests 4 levels


def read_bytes(path, what: str, hint: str) -> bytes:
    """The file's bytes, or one sentence: cannot read it (`hint` says what to give), or too large."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise UserError(f"cannot read the {what} {path} ({e.strerror or e}); {hint}") from None
    if len(data) > MAX_BYTES:
        raise InputError(path, 0, f"the {what} is larger than {MAX_BYTES >> 20} MiB; no real one is, so it is not read")
    return data


def read_text(path, what: str, hint: str) -> str:
    """The file as UTF-8 text (TOML and JSON are UTF-8), or an error at the line of the first bad byte."""
    data = read_bytes(path, what, hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(path, line, f"byte 0x{data[e.start]:02x} is not UTF-8 text; save the file as UTF-8") from None


def parse_toml(text: str, path) -> dict:
    """TOML within MAX_DEPTH, or an error at the line tomllib names."""

    def syntax(e):
        if isinstance(e, tomllib.TOMLDecodeError):
            m = re.search(r"\(at line (\d+)", str(e))
            line = int(m.group(1)) if m else (len(text.splitlines()) if "end of document" in str(e) else 0)
            return InputError(path, line, f"{re.sub(r' *[(]at (line|end).*', '', str(e))}; fix the TOML syntax there")
        return None

    return _parsed(tomllib.loads, text, path, syntax)


def parse_json(text: str, path, hint: str):
    """JSON within MAX_DEPTH, or an error at the line the parser names (`hint`: what to give instead)."""

    def syntax(e):
        if isinstance(e, json.JSONDecodeError):
            return InputError(path, e.lineno, f"not valid JSON ({e.msg}); {hint}")
        return None

    return _parsed(json.loads, text, path, syntax)


def _parsed(loads, text: str, path, syntax):
    """`loads(text)` within MAX_DEPTH; `syntax(e)`: the parser's syntax error as an InputError, or None."""
    try:
        doc = loads(text)
    except RecursionError:
        raise _too_deep(path) from None
    except ValueError as e:  # a syntax error, or an integer of more digits than Python converts
        raise (syntax(e) or InputError(path, 0, f"{e}; no real file holds such a number")) from None
    check_depth(doc, path)
    return doc


def _too_deep(path) -> InputError:
    return InputError(
        path, 0, f"tables or lists are nested more than {MAX_DEPTH} deep; no real file is, so it is not read"
    )


def check_depth(doc, path) -> None:
    """Refuse a parsed document nested deeper than MAX_DEPTH (walked without recursion)."""
    todo = [(doc, 0)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(path)
        if isinstance(node, dict):
            todo += [(v, depth + 1) for v in node.values()]
        elif isinstance(node, list):
            todo += [(v, depth + 1) for v in node]


def closest(word, choices):
    """The choice `word` is most likely a misspelling of (difflib), or None."""
    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def not_a_key(key, allowed, where: str = "") -> str:
    """`'endpoint' is not a key of a tenant; did you mean 'endpoints'?` (the keys listed when none is close)."""
    close = closest(key, allowed)
    hint = f"did you mean '{close}'?" if close else f"the keys are {', '.join(sorted(allowed))}"
    return f"'{key}' is not a key{' of ' + where if where else ''}; {hint}"


def key_line(text: str, key, start: int = 1) -> int:
    """1-based line, at or after line `start`, where `key = ...` is written (bare or quoted, also inside an
    inline table); `start` itself when it is not found."""
    pat = re.compile(rf"""(^|[{{,\s.])(["']?){re.escape(str(key))}\2\s*=""")
    lines = text.splitlines()
    for i in range(max(start, 1) - 1, len(lines)):
        if pat.search(lines[i].split("#")[0]):
            return i + 1
    return start


def type_name(v, table: str = "a table") -> str:
    """What a parsed value is, in the words of the file: a string, an integer, a table (JSON: an object) …"""
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: table}.get(
        type(v), "a date or time"
    )
