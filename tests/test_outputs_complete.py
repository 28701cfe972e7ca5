"""One decode, every format: every InfiniBand field `-V` shows of a packet is in `--format jsonl`,
`-T json`, `-T ek`, `-T fields` and CSV with the same value, for every packet of every public capture, every
sample and a corpus of mutants (tests/test_fuzz_decode.py's mutations): the compiled path either holds a
field or hands the packet to the full decoder, never printing less."""

import csv
import io
import ipaddress
import json
import random
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
from one_process import ibwire_runs
from test_fuzz_decode import mutations, seeds
from tshark_oracle import PUBLIC

from ibwire.decode import decode_frame
from ibwire.files import iter_frames
from ibwire.files.writers import PcapWriter
from ibwire.report.packets.tshark_doc import Session, Times, document, leaves

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted(PUBLIC.glob("*.pcap")) + sorted((ROOT / "captures").glob("*.pcap"))
IB = "infiniband."


def shown(path) -> list:
    """Per frame, {field: [tshark-shaped text]} of the InfiniBand fields its -V tree shows."""
    out = []
    for f in iter_frames(path):
        d = decode_frame(f)
        found = {}
        for _, items in document(d, Times(0, 0, 0, 0), Session()):
            titles = _titles(items, set())
            for k, v in leaves(items, []):
                if k.startswith(IB) and k != IB + "reserved" and k not in titles:
                    found.setdefault(k, []).append("1" if v is True else "0" if v is False else v)
        out.append(found)
    return out


def _titles(items: list, out: set) -> set:
    """Items that title a subtree (a header's bytes, `infiniband.bth`): the subtree holds its fields."""
    for k, v in items:
        if k.endswith("_tree"):
            out.add(k[:-5])
        if isinstance(v, list):
            _titles(v, out)
    return out


def _flat_jsonl(obj: dict) -> dict:
    flat = {}
    for layer, fields in obj["layers"].items():
        for name, value in fields.items() if isinstance(fields, dict) else ():
            flat[f"{layer}.{name}"] = value
    return flat


def _jsonl_names() -> dict:
    """tshark's field name -> the jsonl keys that may hold it: the key of the same name, a layer's field
    that tshark names otherwise (its `ws_alias`, e.g. IPoIB's type is `rwh.etype`, AtomicETH's VA `reth.va`),
    and the CRC values (docs/jsonl.md: `icrc.value`, `vcrc.value`)."""
    import dissectors.layers  # noqa: F401  (every layer class defined)
    from dissectors.base import IBLayer

    names = {"invariant.crc": ["icrc.value"], "variant.crc": ["vcrc.value"]}
    todo = [IBLayer]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        for field, alias in getattr(cls, "ws_alias", {}).items():
            if alias:
                names.setdefault(alias, []).append(f"{cls.ws_name}.{field}")
    return names


JSONL_NAMES = _jsonl_names()


def _in_jsonl(name: str, texts: list, flat: dict) -> bool:
    for key in [name] + JSONL_NAMES.get(name, []):
        value = flat.get(key)
        if isinstance(value, list):
            if len(value) == len(texts) and all(map(_same, texts, value)):
                return True
        elif key in flat and _same(texts[0], value):
            return True
    return False


def _same(text: str, value) -> bool:
    """A tshark-shaped text and a jsonl value hold the same thing (numbers as numbers, 64-bit numbers as
    "0x…" strings, bytes as hex, addresses as text)."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, str) and value.startswith("0x"):
        value = int(value, 16)
    if isinstance(value, str) and ":" in value and ":" in text and len(text) == 47:  # a GID shown as bytes
        try:
            return ipaddress.IPv6Address(value).packed.hex() == text.replace(":", "")
        except ValueError:
            return False
    if isinstance(value, int):
        try:
            return int(text, 0) == value
        except ValueError:
            return False
    return str(value).replace(":", "").lower() == text.replace(":", "").lower() or str(value) == text


@lru_cache(maxsize=None)
def misses(path) -> Counter:
    """(format, field) -> how many packets of the capture miss the field, or hold another value, in it."""
    want = shown(path)
    keys = sorted({k for w in want for k in w})
    args = [a for k in keys for a in ("-e", k)]
    runs = [("--format", "jsonl"), ("-T", "ek")] + ([("-T", "fields", *args), ("-T", "csv", *args)] if keys else [])
    jsonl, ek, *more = ibwire_runs([["decode", path, *r] for r in runs])  # in one process (one_process.py)
    jsonl = [json.loads(x) for x in jsonl.splitlines()]
    ek = [json.loads(x) for x in ek.splitlines()[1::2]]
    assert len(jsonl) == len(ek) == len(want)
    rows = more[0].splitlines() if keys else []
    table = list(csv.reader(io.StringIO(more[1])))[1:] if keys else []
    missing = Counter()
    for n, w in enumerate(want):
        flat, layer = _flat_jsonl(jsonl[n]), ek[n]["layers"].get("infiniband", {})
        cols, cells = dict(zip(keys, rows[n].split("\t"))), dict(zip(keys, table[n]))
        for k, texts in w.items():
            name = k[len(IB) :]
            missing["jsonl", k] += not _in_jsonl(name, texts, flat)
            missing["ek", k] += f"infiniband_{k}".replace(".", "_") not in layer
            missing["fields", k] += cols[k].split(",")[0].replace(":", "") != texts[0].replace(":", "")
            missing["csv", k] += cells[k] != cols[k]
    return +missing


def check(path, formats=("jsonl", "ek", "fields", "csv")) -> None:
    missing = sorted(k for k in misses(path) if k[0] in formats)
    assert not missing, (path.name, missing)


@pytest.mark.parametrize("fmt", ["jsonl", "ek", "fields", "csv"])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_format_carries_the_tree(path, fmt):
    check(path, (fmt,))


def test_mutants_too(tmp_path):
    rng = random.Random(27)
    gen = mutations(rng, seeds())
    path = tmp_path / "mutants.pcap"
    with PcapWriter(str(path), 1) as w:
        for i in range(400):
            link, data = next(gen)
            while link != 1:
                link, data = next(gen)
            w.write(data, ts=1700000000.0 + i)
    check(path)
