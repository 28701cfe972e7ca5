"""The compiled part of ibwire: the fast path's per-packet loops (ibwire/fast/native/), CRC-32 from
zlib where the CPU lacks PCLMULQDQ.  Everything else about the package is declared in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ibwire.fast._native",
                             ["ibwire/fast/native/module.c", "ibwire/fast/native/decode.c",
                              "ibwire/fast/native/crc.c", "ibwire/fast/native/group.c"],
                             depends=["ibwire/fast/native/crc.h", "ibwire/fast/native/decode.h",
                                      "ibwire/fast/native/group.h"],
                             libraries=["z"], extra_compile_args=["-O3"])])
