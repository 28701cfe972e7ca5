"""JSON text exactly as `json.dumps(obj, indent=2, default=str)` writes it, at the speed of the compiled
encoder for tables (lists of dicts with the same keys and plain values): each column is encoded in one
call and each row filled into one template.  Anything else is handed to json.dumps itself."""

import json
from json.encoder import encode_basestring_ascii

PLAIN = {int, float, bool, type(None)}  # written without a comma or a brace


def dumps(obj, level: int = 0) -> str:
    """`obj` as json.dumps(obj, indent=2, default=str) writes it, nested `level` deep."""
    pad, end = "\n" + "  " * (level + 1), "\n" + "  " * level
    if type(obj) is dict and obj and all(type(k) is str for k in obj):
        items = (f"{encode_basestring_ascii(k)}: {dumps(v, level + 1)}" for k, v in obj.items())
        return "{" + pad + ("," + pad).join(items) + end + "}"
    if type(obj) is list and obj:
        rows = _table(obj, level + 1)
        if rows is None:
            rows = [dumps(v, level + 1) for v in obj]
        return "[" + pad + ("," + pad).join(rows) + end + "]"
    return json.dumps(obj, indent=2, default=str).replace("\n", end)  # JSON strings hold no raw newline


def _table(rows: list, level: int):
    """Each row's text, or None unless every row is a dict with the first one's keys and plain values."""
    first = rows[0]
    if type(first) is not dict or not first or not all(type(k) is str for k in first):
        return None
    keys = tuple(first)
    if any(type(r) is not dict or tuple(r) != keys for r in rows):
        return None
    columns = [_column(values) for values in zip(*(r.values() for r in rows))]
    if any(c is None for c in columns):
        return None
    pad = "\n" + "  " * (level + 1)
    names = (encode_basestring_ascii(k).replace("{", "{{").replace("}", "}}") for k in keys)
    template = "{{" + ",".join(f"{pad}{name}: {{}}" for name in names) + "\n" + "  " * level + "}}"
    return [template.format(*values) for values in zip(*columns)]


def _column(values: tuple):
    """The JSON text of each value, or None when one is not a string, number, boolean or null."""
    kinds = set(map(type, values))
    if kinds <= PLAIN:
        return json.dumps(values)[1:-1].split(", ")
    if kinds == {str}:
        return list(map(encode_basestring_ascii, values))
    if kinds <= {str, type(None)}:
        return ["null" if v is None else encode_basestring_ascii(v) for v in values]
    return None
