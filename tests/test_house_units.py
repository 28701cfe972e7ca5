"""Units a reader can hold in mind: no Python function of the product whose body (signature and docstring
aside) runs over 80 lines, and no C function of the compiled part declared with more than 8 parameters
(a job struct instead: decode_job, render_job, group_job, walk_job, nspcap_job)."""

import ast
import re

from conftest import ROOT

BODY_MAX = 80
C_PARAMS_MAX = 8


def long_functions(source: str, name: str) -> list:
    """'file:line name (n lines)' for each function whose body is over BODY_MAX lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        lines = node.end_lineno - body[0].lineno + 1
        if lines > BODY_MAX:
            out.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def wide_c_functions(header: str, name: str) -> list:
    """'file name (n parameters)' for each prototype in a header with more than C_PARAMS_MAX parameters."""
    out = []
    for m in re.finditer(r"^[A-Za-z_][\w \*]*?\b(\w+)\(([^;{]*?)\);", header, re.M | re.S):
        params = [p for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
        if len(params) > C_PARAMS_MAX:
            out.append(f"{name} {m.group(1)} ({len(params)} parameters)")
    return out


def test_no_function_body_is_over_80_lines():
    found = []
    for top in ("ibwire", "dissectors"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found += long_functions(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "split these into named steps:\n" + "\n".join(found)


def test_c_entry_points_take_a_struct_not_a_list_of_arguments():
    found = []
    for path in sorted((ROOT / "ibwire" / "decode" / "native").glob("*.h")):
        found += wide_c_functions(path.read_text(), path.name)
    assert not found, "pass these a job struct:\n" + "\n".join(found)


def test_the_checks_catch_what_they_should():
    body = "\n".join(f"    x{i} = {i}" for i in range(BODY_MAX + 1))
    assert long_functions(f'def f():\n    """Doc."""\n{body}\n', "m.py") == ["m.py:1 f (81 lines)"]
    assert long_functions(f'def f():\n    """Doc."""\n{body[: body.rindex(chr(10))]}\n', "m.py") == []
    wide = "int f(int a, int b, int c, int d,\n      int e, int f, int g, int h, int i);\nvoid g(void);\n"
    assert wide_c_functions(wide, "x.h") == ["x.h f (9 parameters)"]
