"""JSON text exactly as `json.dumps(obj, indent=2, default=str)` writes it, at the speed of the compiled
encoder for tables (lists of dicts with the same keys and plain values): each column is encoded in one
call and a block of rows is joined at once, written as it is made.  Rows held as columns (a sequence with
a `columns` attribute: key -> list, as storage.Rows) are read from them.  Anything else is handed to
json.dumps itself."""

import json
from json.encoder import encode_basestring_ascii
from operator import itemgetter

PLAIN = {int, float, bool, type(None)}  # written without a comma or a brace
BLOCK = 16384  # rows joined and written at a time
FEW = 8  # a column of ints with at most one distinct value per FEW rows is written from a table of their texts


def dumps(obj, level: int = 0) -> str:
    """`obj` as json.dumps(obj, indent=2, default=str) writes it, nested `level` deep."""
    parts = []
    dump(obj, parts.append, level)
    return "".join(parts)


def dump(obj, write, level: int = 0) -> None:
    """Write `obj` (write: a function taking text) as json.dumps(obj, indent=2, default=str) writes it,
    nested `level` deep."""
    pad, end = "\n" + "  " * (level + 1), "\n" + "  " * level
    if type(obj) is dict and obj and all(type(k) is str for k in obj):
        write("{")
        for i, (k, v) in enumerate(obj.items()):
            write(("," if i else "") + pad + encode_basestring_ascii(k) + ": ")
            dump(v, write, level + 1)
        write(end + "}")
    elif hasattr(obj, "columns") and not obj:
        write("[]")
    elif (type(obj) is list or hasattr(obj, "columns")) and obj:
        if not _table(obj, level + 1, write):
            write("[" + pad + ("," + pad).join(dumps(v, level + 1) for v in obj) + end + "]")
    else:
        write(json.dumps(obj, indent=2, default=str).replace("\n", end))  # JSON strings hold no raw newline


def _table(rows: list, level: int, write) -> bool:
    """Write the list of rows (nested `level` deep) as a table if every row is a dict with the first one's
    keys and plain values; whether it did."""
    columns = getattr(rows, "columns", None)
    if columns is None:
        first = rows[0]
        if type(first) is not dict or not first or not all(type(k) is str for k in first):
            return False
        keys = tuple(first)
        if any(type(r) is not dict or tuple(r) != keys for r in rows):
            return False
        columns = {k: list(map(itemgetter(k), rows)) for k in keys}
    texts = [_column(values) for values in columns.values()]
    if any(t is None for t in texts):
        return False
    pad, inner = "\n" + "  " * level, "\n" + "  " * (level + 1)
    names = [encode_basestring_ascii(k) + ": " for k in columns]
    seps = ["{" + inner + names[0], *(("," + inner + n) for n in names[1:]), pad + "}"]
    seps[0] = "," + pad + seps[0]
    n, width = len(rows), 2 * len(texts) + 1
    write("[")
    for a in range(0, n, BLOCK):
        b = min(a + BLOCK, n)
        grid = [None] * ((b - a) * width)  # row by row: separator, value, separator, ... (slices filled in C)
        for j, sep in enumerate(seps):
            grid[2 * j :: width] = [sep] * (b - a)
        for j, t in enumerate(texts):
            grid[2 * j + 1 :: width] = t[a:b]
        text = "".join(grid)
        write(text[1:] if a == 0 else text)  # the first row follows "[" without a comma
    write(pad[:-2] + "]")
    return True


def _column(values):
    """The JSON text of each value, or None when one is not a string, number, boolean or null."""
    kinds = set(map(type, values))
    if kinds <= PLAIN and not kinds & {float, bool}:  # ints and nulls: few distinct ones written once each
        distinct = set(values)
        if len(distinct) * FEW <= len(values):
            return list(map({v: json.dumps(v) for v in distinct}.__getitem__, values))
    if kinds <= PLAIN:
        return json.dumps(values)[1:-1].split(", ")
    if kinds <= {str, type(None)}:
        distinct = {v: "null" if v is None else encode_basestring_ascii(v) for v in set(values)}
        return list(map(distinct.__getitem__, values))
    return None
