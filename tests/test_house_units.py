"""Units a reader can hold in mind: no Python function of the product or the benchmarks over 80 lines from
its `def` to its end (decorators aside), no C function of the compiled part with a body over 80 lines, and
no C function declared with more than 8 parameters (a job struct instead: decode_job, render_job,
group_job, walk_job, nspcap_job).  The few that may stay longer for now are in ALLOWED, each with its
reason; an entry no longer needed fails too, so the list only shrinks."""

import ast
import re

from conftest import ROOT

LINES_MAX = 80
C_PARAMS_MAX = 8
NATIVE = ROOT / "ibwire" / "decode" / "native"

ALLOWED: dict = {}  # "file function": the reason it stays longer for now (none does)


def long_functions(source: str, name: str) -> dict:
    """{'file function': 'file:line function (n lines)'} for each function over LINES_MAX lines, counted
    from the `def` line to the last line of its body."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > LINES_MAX:
                out[f"{name} {node.name}"] = f"{name}:{node.lineno} {node.name} ({lines} lines)"
    return out


def c_functions(source: str):
    """(name, line of the signature, body lines from `{` to `}`) of each function defined at the top level
    of a C file written as this project's are: the signature from column 0, the closing brace alone in
    column 0, or the whole function on one line."""
    lines = source.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"[A-Za-z_][\w \*]*?\b(\w+)\(", lines[i])
        j = i
        while m and j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
            j += 1
        if m and j < len(lines) and "{" in lines[j] and not lines[j].rstrip().endswith(";"):
            end = j if lines[j].rstrip().endswith("}") else lines.index("}", j)  # or all on one line
            yield m.group(1), i + 1, end - j + 1
            i = end
        i += 1


def long_c_functions(source: str, name: str) -> dict:
    """{'file function': 'file:line function (n lines)'} for each C function whose body is over LINES_MAX lines."""
    return {f"{name} {fn}": f"{name}:{line} {fn} ({n} lines)" for fn, line, n in c_functions(source) if n > LINES_MAX}


def wide_c_functions(header: str, name: str) -> list:
    """'file name (n parameters)' for each prototype in a header with more than C_PARAMS_MAX parameters."""
    out = []
    for m in re.finditer(r"^[A-Za-z_][\w \*]*?\b(\w+)\(([^;{]*?)\);", header, re.M | re.S):
        params = [p for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
        if len(params) > C_PARAMS_MAX:
            out.append(f"{name} {m.group(1)} ({len(params)} parameters)")
    return out


def _check(found: dict, mine) -> None:
    """No long function but those ALLOWED, and no ALLOWED entry of `mine` (its keys' files) left unused."""
    new = [v for k, v in found.items() if k not in ALLOWED]
    assert not new, "split these into named steps:\n" + "\n".join(new)
    stale = [k for k in ALLOWED if mine(k) and k not in found]
    assert not stale, "now short enough: remove from ALLOWED in tests/test_house_units.py: " + ", ".join(stale)


def test_no_python_function_is_over_80_lines():
    found = {}
    for top in ("ibwire", "dissectors", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found.update(long_functions(path.read_text(), str(path.relative_to(ROOT))))
    _check(found, lambda k: k.split()[0].endswith(".py"))


def test_no_c_function_body_is_over_80_lines():
    found = {}
    for path in sorted(NATIVE.glob("*.c")):
        found.update(long_c_functions(path.read_text(), path.name))
    _check(found, lambda k: k.split()[0].endswith(".c"))


def test_c_entry_points_take_a_struct_not_a_list_of_arguments():
    found = []
    for path in sorted(NATIVE.glob("*.h")):
        found += wide_c_functions(path.read_text(), path.name)
    assert not found, "pass these a job struct:\n" + "\n".join(found)


def test_the_checks_catch_what_they_should():
    body = "\n".join(f"    x{i} = {i}" for i in range(LINES_MAX - 1))
    assert long_functions(f"@deco\ndef f():\n{body}\n    return 1\n", "m.py") == {"m.py f": "m.py:2 f (81 lines)"}
    assert long_functions(f"@deco\ndef f():\n{body}\n", "m.py") == {}
    c_body = "\n".join(f"    x += {i};" for i in range(LINES_MAX - 1))
    c = f"static int f(int x,\n             int y)\n{{\n{c_body}\n}}\n\ntypedef struct {{\n    int a;\n}} s;\n"
    assert long_c_functions(c, "x.c") == {"x.c f": "x.c:1 f (81 lines)"}
    assert long_c_functions(c.replace("    x += 0;\n", ""), "x.c") == {}
    tiny = 'int g(void);\nPyDoc_STRVAR(d,\n "x");\nstatic int one(int x) { return x; }\nint h(void)\n{\n}\n'
    assert list(c_functions(tiny)) == [("one", 4, 1), ("h", 5, 2)]
    wide = "int f(int a, int b, int c, int d,\n      int e, int f, int g, int h, int i);\nvoid g(void);\n"
    assert wide_c_functions(wide, "x.h") == ["x.h f (9 parameters)"]
