"""The C extension, as pyproject.toml's [[tool.ibwire.ext-modules]] describes it (everything else is in
pyproject.toml): setuptools' own [tool.setuptools.ext-modules] is experimental and warns on every build."""

import tomllib
from pathlib import Path

from setuptools import Extension, setup

with open(Path(__file__).resolve().parent / "pyproject.toml", "rb") as f:
    native = tomllib.load(f)["tool"]["ibwire"]["ext-modules"]
setup(ext_modules=[Extension(**{k.replace("-", "_"): v for k, v in ext.items()}) for ext in native])
