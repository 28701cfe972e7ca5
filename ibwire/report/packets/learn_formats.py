"""The -T json, -T ek, jsonl and -V documents as the learner (ibwire.report.packets.templates) reads them: each
format's items of a decoded frame, and the numbers besides its bytes it prints (times, frame numbers, days).
"""

import json
import time
from typing import Callable, Optional

from ibwire.report.packets import tshark_doc as td
from ibwire.report.packets.session import Session
from ibwire.report.packets.templates import Format
from ibwire.report.packets.values import json_safe, seconds


def _day(ns: int) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ns // 10**9))


NUMBER = (str, lambda name: [("udec", name)])
SECONDS = (seconds, lambda name: [("span", name, 9)])
FLOAT_SECONDS = (lambda ns: repr(ns / 1e9), lambda name: [("repr", name)])


class _Numbered(Session):
    """The session a learned sample sees: its stream numbers and ERF port are the sample's own."""

    def __init__(self, meta):
        super().__init__()
        self.meta = meta

    def interface(self, port: int) -> int:
        return int(self.meta["interface"])

    def note(self, src, sport, dst, dport, ns):
        m = self.meta
        return int(m["stream"]), ns - int(m["stream_relative"]), ns - int(m["stream_delta"])


def _flat(items: list, sig: list, values: list) -> None:
    for k, v in items:
        if isinstance(v, list):
            sig.append(("{", k))
            _flat(v, sig, values)
            sig.append("}")
        else:
            sig.append(k)
            values.append(("1" if v else "0") if isinstance(v, bool) else v)  # as json_text writes it


def _put(items: list, it) -> list:
    return [(k, _put(v, it) if isinstance(v, list) else next(it)) for k, v in items]


def _json_items(d, meta):
    times = td.Times(*(int(meta[k]) for k in ("epoch", "delta", "delta_displayed", "relative")))
    layers = td.document(d, times, _Numbered(meta))
    sig, values = [], [f"packets-{_day(int(meta['epoch']))}"]
    _flat(layers, sig, values)

    def replace(subs):
        new = list(values)
        for i, text in subs:
            new[i] = text
        return td.json_text(new[0], _put(layers, iter(new[1:])))

    return sig, values, replace


def _ek_items(d, meta):
    """-T ek: the index line's day, the timestamp and each group's values (ibwire.report.packets.tshark_doc.ek_groups)."""
    times = td.Times(*(int(meta[k]) for k in ("epoch", "delta", "delta_displayed", "relative")))
    groups = [(name, td.ek_groups(name, items)) for name, items in td.document(d, times, _Numbered(meta))]
    ns = int(meta["epoch"])
    sig, values = [], [f"packets-{_day(ns)}", str(ns // 10**6)]
    for name, pairs in groups:
        sig.append(("{", name))
        for key, vals in pairs:
            sig.append((key, len(vals), tuple(type(v).__name__ for v in vals)))
            values += vals

    def replace(subs):
        new = list(values)
        for i, text in subs:
            new[i] = text
        it = iter(new[2:])
        layers = [(name, [(key, [next(it) for _ in vals]) for key, vals in pairs]) for name, pairs in groups]
        return td.ek_index(new[0]) + td.ek_grouped_text(new[1], layers) + "\n"

    return sig, values, replace


def _ek_time(ns: int) -> str:
    """frame.time as -T ek writes it: UTC, ISO 8601, to the nanosecond."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


class _Seconds(str):
    """The jsonl "time": its text, written as a JSON number."""


def _jsonl_walk(obj, sig: list, values: list, put: Optional[Callable] = None):
    """Walk a JSON value depth first: its signature (keys, containers, leaf types) into `sig`, its leaves
    into `values`; returns it with each leaf i replaced by put(i) when `put` is given."""
    if isinstance(obj, dict):
        sig.append("{")
        out = {}
        for k, v in obj.items():
            sig.append(k)
            out[k] = _jsonl_walk(v, sig, values, put)
        sig.append("}")
        return out
    if isinstance(obj, list):
        sig.append("[")
        out = [_jsonl_walk(v, sig, values, put) for v in obj]
        sig.append("]")
        return out
    values.append(obj)
    sig.append(type(obj).__name__)
    return put(len(values) - 1) if put else obj


def _jsonl_items(d, meta):
    obj = json_safe(d.to_json(), "")
    obj["frame"], obj["time"] = int(meta["frame"]), _Seconds(seconds(int(meta["epoch"])))
    sig, values = [], []
    _jsonl_walk(obj, sig, values)

    when = next(i for i, v in enumerate(values) if isinstance(v, _Seconds))
    mark = "\x00time\x00"

    def replace(subs):
        new = dict(subs)
        doc = _jsonl_walk(obj, [], [], lambda i: new.get(i, mark if i == when else values[i]))
        return json.dumps(doc).replace(json.dumps(mark), values[when]) + "\n"

    return sig, values, replace


def _tree_items(d, meta):
    from ibwire.report.packets.tree import own_fields, tree_text

    times = td.Times(*(int(meta[k]) for k in ("epoch", "delta", "delta_displayed", "relative")))
    layers = td.document(d, times, _Numbered(meta))
    lines = (tree_text(layers, d.flat, own_fields(d.flat, layers)) + "\n").split("\n")

    def replace(subs):
        new = list(lines)
        for i, text in subs:
            new[i] = text
        return "\n".join(new)

    return [len(lines)], lines, replace


FORMATS = {
    "json": Format(
        _json_items,
        {
            "number": NUMBER,
            "seconds": SECONDS,
            "frame.time": (td.frame_time, lambda name: [("date", name, 9, 8)]),
            "index": (lambda ns: f"packets-{_day(ns)}", lambda name: ["packets-", ("date", name, 0, 4)]),
        },
    ),
    "ek": Format(
        _ek_items,
        {
            "number": NUMBER,
            "seconds": SECONDS,
            "ek time": (_ek_time, lambda name: [("date", name, 0, 6), "T", ("date", name, 9, 2), "Z"]),
            "index": (lambda ns: f"packets-{_day(ns)}", lambda name: ["packets-", ("date", name, 0, 4)]),
        },
    ),
    "jsonl": Format(_jsonl_items, {"number": NUMBER, "seconds": SECONDS, "float seconds": FLOAT_SECONDS}),
    "tree": Format(
        _tree_items,
        {"number": NUMBER, "seconds": SECONDS, "frame.time": (td.frame_time, lambda name: [("date", name, 9, 8)])},
        lines=True,
        steady=(("Dot1Q", "vlan"), ("IPv6", "fl")),  # -V draws their bits
    ),
}
