"""One home per protocol number: dissectors/numbers.py declares every ethertype, port, link type and
well-known Q_Key the product tests against, and nothing else in the product writes one as a literal or
declares it again; the compiled decoder reads them from numbers.h, which tools/gen_numbers_h.py writes from
the registry."""

import ast
import io
import re
import sys
import tokenize

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gen_numbers_h  # noqa: E402

from dissectors import numbers  # noqa: E402

REGISTRY = {k: v for k, v in vars(numbers).items() if k.isupper()}
# hex spellings that can only mean the registry's value; decimal ones for ports and link types (bar 1)
HEX = {v: k for k, v in REGISTRY.items() if k.startswith("ETHERTYPE_") or k.endswith("_QKEY")}
DECIMAL = {v: k for k, v in REGISTRY.items() if (k.endswith("_PORT") or k.startswith("LINKTYPE_")) and v > 1}
C_LINKTYPE = re.compile(r"\blt\s*==\s*(\d+)\b")


def python_literals(source: str, name: str) -> list:
    """'file:line literal (NAME)' for each number token that spells a registry value."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.NUMBER:
            continue
        text = tok.string.lower().replace("_", "")
        try:
            value = int(text, 0)
        except ValueError:
            continue
        hit = HEX.get(value) if text.startswith("0x") else DECIMAL.get(value) if text[0] != "0" else None
        if hit:
            out.append(f"{name}:{tok.start[0]} {tok.string} ({hit})")
    return out


def redeclared(source: str, name: str) -> list:
    """'file:line NAME' for each module-level assignment to a registry name."""
    out = []
    for node in ast.parse(source).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and n.id in REGISTRY:
                    out.append(f"{name}:{node.lineno} {n.id}")
    return out


def c_literals(source: str, name: str) -> list:
    """'file:line literal' for each ethertype spelled in hex, or link type compared as a number, in C code
    (comments aside)."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), source, flags=re.S)
    out = []
    for lineno, line in enumerate(code.splitlines(), 1):
        for m in re.finditer(r"\b0[xX][0-9a-fA-F]+\b", line):
            if int(m.group(0), 16) in HEX and len(m.group(0)) == 6:
                out.append(f"{name}:{lineno} {m.group(0)}")
        out += [f"{name}:{lineno} lt == {m.group(1)}" for m in C_LINKTYPE.finditer(line)]
    return out


def product_python():
    for top in ("ibwire", "dissectors"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path != ROOT / "dissectors" / "numbers.py":
                yield path, path.read_text(), str(path.relative_to(ROOT))


def test_no_protocol_number_is_written_as_a_literal_outside_the_registry():
    # (ws_labels.py is tshark's names of values, generated: its IP protocol table names 113 and 197 too)
    found = [
        hit
        for _, text, name in product_python()
        if not name.endswith("ws_labels.py")
        for hit in python_literals(text, name)
    ]
    assert not found, "use the names of dissectors/numbers.py:\n" + "\n".join(found)


def test_no_module_declares_a_registry_name_again():
    found = [hit for _, text, name in product_python() for hit in redeclared(text, name)]
    assert not found, "import these from dissectors/numbers.py instead:\n" + "\n".join(found)


def test_the_compiled_decoder_takes_its_numbers_from_the_generated_header():
    native = ROOT / "ibwire" / "decode" / "native"
    assert (native / "numbers.h").read_text() == gen_numbers_h.render(), "run tools/gen_numbers_h.py"
    found = []
    for path in sorted([*native.glob("*.c"), *native.glob("*.h")]):
        if path.name != "numbers.h":
            found += c_literals(path.read_text(), path.name)
    assert not found, "use numbers.h's names:\n" + "\n".join(found)


def test_the_checks_catch_what_they_should():
    assert python_literals("x = 0x8100 + 0x8101\ny = 4791\nz = 0x12B7\n", "m.py") == [
        "m.py:1 0x8100 (ETHERTYPE_VLAN)",
        "m.py:2 4791 (ROCE_V2_PORT)",
    ]
    assert python_literals("s = '0x8100 4791'  # 0x8915\nlt = 1\n", "m.py") == []
    assert redeclared("DEFAULT_PKEY = 0x7FFF\ndef f():\n    GSI_QKEY = 1\n", "m.py") == ["m.py:1 DEFAULT_PKEY"]
    c = "if (e == 0x86DD) /* 0x0800 */\n    x = 0x86DD0000;\nif (lt == 197)\n"
    assert c_literals(c, "x.c") == ["x.c:1 0x86DD", "x.c:3 lt == 197"]
