"""JSON text as `json.dumps(obj, indent=2, default=str)` writes it, about twice as fast: with an indent the
standard library encodes in Python through nested generators; this walks the document once, appending pieces.
Only the plain types are written here (str, int, float, None, bool, dict with str keys, list, tuple); anything
else (a numpy number, NaN, a subclass) hands the whole document to json.dumps, so the text is always its."""

import json
from json.encoder import encode_basestring_ascii as _quoted

_INFINITE = (float("inf"), float("-inf"))


class _Unusual(Exception):
    """A value the plain walk leaves to json.dumps."""


def dumps_indented(obj) -> str:
    """json.dumps(obj, indent=2, default=str), character for character."""
    parts: list = []
    try:
        _put(obj, parts, "\n")
    except _Unusual:
        return json.dumps(obj, indent=2, default=str)
    return "".join(parts)


def _put(o, parts: list, newline: str) -> None:
    """Append the text of `o`, whose lines start with `newline` (a line break and the indent of its level)."""
    t = type(o)
    if t is str:
        parts.append(_quoted(o))
    elif t is int:
        parts.append(int.__repr__(o))
    elif t is float:
        if o != o or o in _INFINITE:
            raise _Unusual
        parts.append(float.__repr__(o))
    elif o is None or o is True or o is False:
        parts.append("null" if o is None else "true" if o else "false")
    elif t is dict:
        _put_dict(o, parts, newline)
    elif t is list or t is tuple:
        if not o:
            parts.append("[]")
            return
        inner = newline + "  "
        parts.append("[" + inner)
        for k, v in enumerate(o):
            if k:
                parts.append("," + inner)
            _put(v, parts, inner)
        parts.append(newline + "]")
    else:
        raise _Unusual


def _put_dict(o: dict, parts: list, newline: str) -> None:
    if not o:
        parts.append("{}")
        return
    inner = newline + "  "
    parts.append("{" + inner)
    for k, (key, v) in enumerate(o.items()):
        if type(key) is not str:
            raise _Unusual
        parts.append(("," + inner if k else "") + _quoted(key) + ": ")
        _put(v, parts, inner)
    parts.append(newline + "}")
