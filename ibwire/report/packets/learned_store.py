"""Learned programs kept from one run to the next, as Python keeps compiled bytecode.

Learning a shape's program (ibwire.report.packets.templates) costs a dozen full decodes and scapy's import;
a run that finds the shape's program here prints its frames at once, from the first, without either.  What a
program prints depends on nothing but the frame, its numbers and the code that learned it, so a file holds
the programs of one output format learned by one build: its name is a digest of the format, every source file
of `ibwire` and `dissectors` and the compiled extension, Python's, numpy's and scapy's versions, and what else a
document reads (the manuf file behind `eth.*.oui_resolved`, the time zone).  A
change to any of them names another file; the newest KEPT_FILES stay.  The directory is
ibwire.files.cachedir's; a program read back is checked op by op (program.valid) before it is used, and a
file that is not whole JSON of this layout is ignored.  Only programs that were learned, never failures, are
kept: a shape whose learning failed is tried again, as in a new run.
"""

import base64
import functools
import hashlib
import importlib.util
import json
import os
import sys
from typing import NamedTuple, Optional

import numpy as np

from ibwire.files import cachedir
from ibwire.report.packets.program import valid

LAYOUT_VERSION = 1  # this file's JSON layout
SUFFIX = ".programs.json"
KEPT_FILES = 8
MAX_BYTES = 64 << 20
MAX_SHAPES = 4096  # programs one file holds at most (a fuzz corpus learns few: its frames are all unlike)


class Shape(NamedTuple):
    """How a document is printed from a frame: the program, and what the frame is learned to look like."""

    program: bytes
    head: int  # bytes [0, head) hold every header; their non-volatile bits name the shape
    keep: np.ndarray  # head bytes: 1 bits are the shape's, 0 bits vary


def _sources() -> list:
    from dissectors import opcodes
    from ibwire.decode import _native

    paths = [_native.__file__]
    here = os.path.dirname(os.path.abspath(__file__))
    for package in (os.path.dirname(os.path.dirname(here)), os.path.dirname(opcodes.__file__)):  # ibwire, dissectors
        for root, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.join(root, f) for f in sorted(files) if f.endswith((".py", ".c", ".h"))]
    return paths


def _identity(path: Optional[str]) -> str:
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    return f"{path}:{st.st_size}:{st.st_mtime_ns}" if st else f"{path}:-"


@functools.lru_cache(maxsize=None)
def digest(fmt: str) -> str:
    """The name of the build and settings that learned programs of format `fmt` belong to."""
    from ibwire.report.packets import manuf

    h = hashlib.sha256(f"{LAYOUT_VERSION}\0{fmt}\0{sys.version}\0{np.__version__}\0".encode())
    scapy = importlib.util.find_spec("scapy")
    version = os.path.join(os.path.dirname(scapy.origin), "VERSION") if scapy and scapy.origin else None
    for path in _sources() + ([version] if version else []):
        with open(path, "rb") as f:
            h.update(path.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    zone = os.environ.get("TZ", "") + "\0" + os.path.realpath("/etc/localtime")
    h.update(f"{_identity(manuf.path())}\0{zone}".encode())
    return h.hexdigest()[:40]


def kept(fmt: str) -> bool:
    """Does a file of programs of format `fmt` learned by this build wait in the cache directory?"""
    try:
        name = f"{fmt}-{digest(fmt)}{SUFFIX}"
    except (OSError, ImportError, AttributeError):
        return False
    dfd = cachedir.open_dir()
    if dfd is None:
        return False
    try:
        return os.path.isfile(os.path.join(f"/proc/self/fd/{dfd}", name))
    finally:
        os.close(dfd)


class Store:
    """The kept programs of one output format: read once, when first asked; what this run learns is added
    and written back by save()."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.layouts = None  # layout bytes -> [(head, keep, {masked head bytes: program})]
        self.learned = []  # (layout, Shape, masked head bytes) learned in this run
        self.name = None

    def _load(self) -> dict:
        if self.layouts is not None:
            return self.layouts
        self.layouts = {}
        try:
            self.name = f"{self.fmt}-{digest(self.fmt)}{SUFFIX}"
        except (OSError, ImportError, AttributeError):
            return self.layouts  # (no name for this build: nothing kept)
        dfd = cachedir.open_dir()
        if dfd is None:
            return self.layouts
        try:
            data = cachedir.read(dfd, self.name, MAX_BYTES)
        finally:
            os.close(dfd)
        if data:
            try:
                self.layouts = _parse(json.loads(data))
            except (ValueError, TypeError, KeyError, AttributeError):
                self.layouts = {}
        return self.layouts

    def variants(self, layout: bytes) -> list:
        """[(head, keep, {masked head: program})] kept for a layout."""
        return self._load().get(layout, [])

    def find(self, layout: bytes, head: int, keep: np.ndarray, masked: bytes) -> Optional[Shape]:
        for h, k, programs in self.variants(layout):
            if h == head and np.array_equal(k, keep) and masked in programs:
                return Shape(programs[masked], head, keep)
        return None

    def add(self, layout: bytes, shape: Shape, masked: bytes) -> None:
        self.learned.append((layout, shape, masked))

    def save(self) -> None:
        """Write what this run learned into the file, beside what it held; any error leaves it as it was."""
        if not self.learned or self.name is None:
            return
        dfd = cachedir.open_dir()
        if dfd is None:
            return
        try:
            data = cachedir.read(dfd, self.name, MAX_BYTES)
            try:
                kept = _parse(json.loads(data)) if data else {}
            except (ValueError, TypeError, KeyError, AttributeError):
                kept = {}
            count = sum(len(p) for v in kept.values() for _, _, p in v)
            for layout, shape, masked in self.learned:
                if count >= MAX_SHAPES:
                    break
                variants = kept.setdefault(layout, [])
                same = [v for v in variants if v[0] == shape.head and np.array_equal(v[1], shape.keep)]
                if not same:
                    variants.append((shape.head, shape.keep, {}))
                    same = variants[-1:]
                count += masked not in same[0][2]
                same[0][2][masked] = shape.program
            if cachedir.write(dfd, self.name, _dumps(kept).encode()):
                cachedir.prune(dfd, SUFFIX, KEPT_FILES)
            self.learned = []
        finally:
            os.close(dfd)


def _parse(doc: dict) -> dict:
    """The file's layouts, each program checked; ValueError (or a TypeError, KeyError) if it is not one."""
    if doc.get("ibwire learned programs") != LAYOUT_VERSION:
        raise ValueError("not a programs file of this layout")
    out = {}
    for layout, head, keep, programs in doc["layouts"]:
        keep = np.frombuffer(bytes.fromhex(keep), np.uint8).copy()
        if not isinstance(head, int) or len(keep) != head:
            raise ValueError("a keep mask of another length than its head")
        got = {}
        for masked, program in programs.items():
            masked, program = bytes.fromhex(masked), base64.b64decode(program, validate=True)
            if len(masked) != head or not valid(program):
                raise ValueError("a shape's head or program is not one")
            got[masked] = program
        out.setdefault(bytes.fromhex(layout), []).append((head, keep, got))
    return out


def _dumps(layouts: dict) -> str:
    rows = [
        [layout.hex(), head, keep.tobytes().hex(), {m.hex(): base64.b64encode(p).decode() for m, p in programs.items()}]
        for layout, variants in layouts.items()
        for head, keep, programs in variants
    ]
    return json.dumps({"ibwire learned programs": LAYOUT_VERSION, "layouts": rows})
