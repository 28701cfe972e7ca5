"""The compiled part of ibwire: the fast path's sequential loops (ibwire/fast/_native.c), CRC-32 from
zlib.  Everything else about the package is declared in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ibwire.fast._native", ["ibwire/fast/_native.c"], libraries=["z"],
                             extra_compile_args=["-O3"])])
