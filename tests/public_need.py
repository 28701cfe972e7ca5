"""Which collected tests read the public captures (../shared/captures/public), for conftest to skip them in
a plain clone: a test reads them when a parameter is a path there, or when its code, the code of the fixtures
it uses or of its module's helpers it calls names `PUBLIC`, `public_dir` or a module constant holding such a
path (`SRINIVAS = PUBLIC / "srinivas_infiniband.pcap"`).  A parameter set left empty by a glob of the missing
folder counts too."""

import inspect
from pathlib import Path
from types import CodeType, FunctionType

ROOTS = frozenset({"PUBLIC", "public_dir"})


def _under(value, public, depth=0):
    if isinstance(value, (str, Path)):
        return str(value).startswith(str(public))
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        return any(_under(v, public, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return any(_under(v, public, depth + 1) for v in value.values())
    return False


def _names(code):
    yield from code.co_names
    yield from code.co_varnames
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


def _reads(func, module, public, seen):
    code = getattr(inspect.unwrap(func), "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    for name in _names(code):
        if name in ROOTS:
            return True
        value = vars(module).get(name) if module else None
        if isinstance(value, FunctionType) and value.__module__ == module.__name__:
            if _reads(value, module, public, seen):
                return True
        elif value is not None and not callable(value) and _under(value, public):
            return True
    return False


def needs(item, public):
    callspec = getattr(item, "callspec", None)
    if callspec and any(_under(v, public) for v in callspec.params.values()):
        return True
    if any(
        str(m.kwargs.get("reason", m.args[0] if m.args else "")).startswith("got empty parameter set")
        for m in item.iter_markers("skip")
    ):
        return True
    if "public_dir" in getattr(item, "fixturenames", ()):
        return True
    module = getattr(item, "module", None)
    seen = set()
    funcs = [getattr(item, "function", None)]
    for name in getattr(item, "fixturenames", ()):
        defs = item._fixtureinfo.name2fixturedefs.get(name) or ()
        funcs += [d.func for d in defs]
    return any(f is not None and _reads(f, inspect.getmodule(f) or module, public, seen) for f in funcs)
