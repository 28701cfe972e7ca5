"""The compiled part of ibwire: the fast path's per-packet loops (ibwire/fast/native/), CRC-32 from
zlib where the CPU lacks PCLMULQDQ.  Everything else about the package is declared in pyproject.toml."""
from setuptools import Extension, setup

NATIVE = "ibwire/fast/native/"
PARTS = ("module", "walk", "decode", "crc", "group")

setup(ext_modules=[Extension("ibwire.fast._native", [f"{NATIVE}{p}.c" for p in PARTS],
                             depends=[f"{NATIVE}{p}.h" for p in PARTS if p != "module"],
                             libraries=["z"], extra_compile_args=["-O3"])])
