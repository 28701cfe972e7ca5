"""The house rules of the code, read from the source with ast: data flows one way (bytes -> files ->
decode -> analyze -> audit -> report -> cli), so no module imports a later stage, and no two modules import
each other through any chain (every import counts, also one inside a function).  And nothing is written
twice: no run of six code lines stands in two places of the project's Python and C.  And a module's name
says what it holds."""

import ast
import collections
import functools
import io
import re
import subprocess
import tokenize
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Stages in data-flow order; a module may import its own stage or an earlier one, never a later one.
# Bytes travel capture/ (or synth/, lab/) -> files/ -> decode/ -> analyze/ -> audit/ -> report/ -> cli/.  The
# producers of bytes write their files through files/ (writers, outfile), so files/ stands before them.  The
# compiled part (ibwire.decode._native: the walk, the decoder, the group-by, the renderer) imports nothing; it
# stands with files/, whose walk is the first to call it.
STAGES = [
    ("protocol tables and layers", ("dissectors", "ibwire.errors", "ibwire.words")),
    ("capture files in and out", ("ibwire.files", "ibwire.decode._native")),
    ("producers of bytes", ("ibwire.capture", "ibwire.synth", "ibwire.lab")),
    ("layers and records", ("ibwire.decode",)),
    ("analyzers", ("ibwire.analyze",)),
    ("the audit", ("ibwire.audit",)),
    ("reports", ("ibwire.report",)),
    ("CLI and the notebook API", ("ibwire.cli", "ibwire.notebook", "ibwire")),  # "ibwire": itself only
]


def modules() -> dict:
    """Dotted name -> source path of every project module, plus the compiled ones pyproject declares."""
    found = {}
    for top in ("ibwire", "dissectors"):
        for p in (ROOT / top).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = p
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for ext in conf["tool"]["ibwire"]["ext-modules"]:
        found[ext["name"]] = None
    return found


def imports_of(name: str, path: Path, known: dict) -> set:
    """Project modules that module `name` (source at `path`) imports anywhere in its text."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            wanted = [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for w in wanted:
            while w and w not in known:  # `from pkg import function` names the package
                w = w.rpartition(".")[0]
            if w and w != name:
                targets.add(w)
    return targets


@functools.lru_cache(maxsize=1)
def graph() -> dict:
    known = modules()
    return {n: imports_of(n, p, known) if p else set() for n, p in known.items()}


def stage_of(name: str) -> int:
    best, at = -1, 0
    for i, (_, prefixes) in enumerate(STAGES):
        for pre in prefixes:
            if (name == pre or (name.startswith(pre + ".") and pre != "ibwire")) and len(pre) > best:
                best, at = len(pre), i
    assert best >= 0, f"{name} belongs to no stage of the data path; add it to STAGES"
    return at


def circles(g: dict) -> list:
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_another_that_imports_it_back():
    assert circles(graph()) == []


def test_imports_follow_the_data_path_one_way():
    wrong = [
        f"{a} ({STAGES[stage_of(a)][0]}) imports {b} ({STAGES[stage_of(b)][0]})"
        for a, targets in sorted(graph().items())
        for b in sorted(targets)
        if stage_of(b) > stage_of(a)
    ]
    assert wrong == []


def test_layers_import_nothing_of_the_application():
    """dissectors/ is importable without the app: scapy layers and protocol tables only."""
    g = graph()
    assert [(a, b) for a in g if a.startswith("dissectors") for b in g[a] if b.startswith("ibwire")] == []


def test_the_checks_catch_what_they_should():
    """The checker itself: a circle and a backwards import in a made-up graph are found."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert stage_of("ibwire.files.capfile") < stage_of("ibwire.analyze.stats") < stage_of("ibwire.cli.stats")
    known = modules()
    g = graph()
    assert "ibwire.files.resync" in g["ibwire.files.walk"] and "ibwire.decode._native" in g["ibwire.files.walk"]
    assert set(g["ibwire.cli.stats"]) >= {"ibwire.analyze.stats", "ibwire.cli.app"}
    assert len(known) > 50


RUN = 6
# What a reader skips when comparing code (as `duplicates` does): blank lines, comments (and C's preprocessor
# lines), imports, lines of lone brackets and commas.  White space is folded.
PASSED_OVER = re.compile(r"(#|//|/\*|\*|import |from \S+ import )|[\s()\[\]{},;:]*$")


def code_lines(text: str, python: bool = True) -> list:
    """(first line, last line, folded text) of the lines that count.  Python counts by statement (a call
    the formatter spreads over ten lines is one), other languages (and Python that does not tokenize) by line."""
    if python:
        try:
            return python_statements(text)
        except (tokenize.TokenError, SyntaxError):
            pass
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        folded = " ".join(line.split())
        if not PASSED_OVER.match(folded):
            out.append((number, number, folded))
    return out


def python_statements(text: str) -> list:
    """Each logical line of Python source (comments left out), its tokens joined by single spaces."""
    out, words, first = [], [], None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NEWLINE:
            folded = " ".join(words)
            if words and not PASSED_OVER.match(folded):
                out.append((first, tok.start[0], folded))
            words, first = [], None
            continue
        first = first or tok.start[0]
        words.append(tok.string)
    return out


def repeated_runs(files: dict, run: int = RUN) -> list:
    """'a.py:10-17 ~ b.py:40-46' for each pair of places where the same `run` counting lines stand (a
    longer repeat shows as several overlapping pairs; a run overlapping itself, as in a list of like lines,
    is not a repeat)."""
    places = collections.defaultdict(list)
    for name, text in sorted(files.items()):
        lines = code_lines(text, name.endswith(".py"))
        for i in range(len(lines) - run + 1):
            places["\n".join(t for _, _, t in lines[i : i + run])].append((name, i, lines[i][0], lines[i + run - 1][1]))
    out = []
    for where in places.values():
        for k, (a, i, a0, a1) in enumerate(where):
            for b, j, b0, b1 in where[k + 1 :]:
                if a != b or j - i >= run:
                    out.append(f"{a}:{a0}-{a1} ~ {b}:{b0}-{b1}")
    return out


def test_no_six_lines_of_code_are_written_twice():
    """A block that two places need is written once and shared (a function, a table, a field list)."""
    names = (
        subprocess.run(["git", "ls-files", "-z", "*.py", "*.c", "*.h"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    files = {n: (ROOT / n).read_text() for n in names if n and (ROOT / n).is_file()}
    assert len(files) > 100
    assert repeated_runs(files) == []


def test_the_repeat_check_finds_a_copied_block_in_other_clothes():
    body = "def f(x):\n    y = x + 1\n    z = y * 2\n    # why\n\n    w = z - 3\n    v = w // 4\n    return v\n"
    other = "import os\n\n\n" + body.replace("    ", "        ").replace("# why", "# a different comment")
    assert repeated_runs({"a.py": body, "b.py": other}) == ["a.py:1-8 ~ b.py:4-11"]
    assert repeated_runs({"a.py": body, "b.py": body.replace("z - 3", "z - 4")}) == []
    assert repeated_runs({"c.py": "x = [\n" + "    0,\n" * 11 + "]\n"}) == []  # overlaps only itself


# Names that say only that a module holds code, not which code.
VAGUE = {
    "util",
    "utils",
    "misc",
    "helper",
    "helpers",
    "tools",
    "tool",
    "stuff",
    "lib",
    "core",
    "main",
    "run",
    "text",
    "things",
    "generic",
    "other",
    "shared",
    "extras",
}


def test_module_names_say_what_they_hold():
    names = subprocess.run(
        ["git", "ls-files", "ibwire/*.py", "dissectors/*.py", "bench/*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(names) > 100
    assert [n for n in names if Path(n).stem in VAGUE] == []
