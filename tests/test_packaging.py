"""ibwire as a user gets it, not as the developers run it: `python -m build` makes an sdist and a wheel
from the committed files (the wheel built from the sdist, so the sdist is complete), and `pip install .`,
the wheel and the sdist each give, in a fresh virtualenv, an `ibwire` whose compiled part is there and
which reads a shipped capture as tshark does, and whose `ibwire --version` names the version the package
metadata carries (written once, as ibwire.__version__).

Slow by nature (three installs with numpy, pyarrow and scapy): built once, installed concurrently, with
one pip cache for the build and the three installs, in the test's temporary folder (not ~/.cache/pip), and
without compiling every dependency's bytecode."""

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "atomics.pcap"


def committed_tree(dest: Path) -> Path:
    """The files git tracks, copied (what a clone holds; nothing built or left by a developer)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, names.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def fresh_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(where)
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def installs(tmp_path_factory):
    """{"pip install .": python, "wheel": python, "sdist": python} of three fresh virtualenvs, and the
    distribution files."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = committed_tree(tmp / "src")
    dist = tmp / "dist"
    pythons = {k: fresh_venv(tmp / f"venv{i}") for i, k in enumerate(("pip install .", "wheel", "sdist"))}
    env = dict(os.environ, PIP_CACHE_DIR=str(tmp / "pip-cache"))  # also for the build's own isolated pip

    def pip(target, *args, cwd=tmp):  # the developers' pip, installing into that virtualenv
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(pythons[target]),
                "install",
                "-q",
                "--no-compile",
                "--disable-pip-version-check",
                *args,
            ],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    running = {"pip install .": pip("pip install .", ".", cwd=src)}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (whl,), (sdist,) = dist.glob("ibwire-*.whl"), dist.glob("ibwire-*.tar.gz")
    running["wheel"] = pip("wheel", str(whl))
    running["sdist"] = pip("sdist", str(sdist))
    for name, p in running.items():
        out, _ = p.communicate(timeout=900)
        assert p.returncode == 0, f"{name}: {out[-3000:]}"
    return pythons, whl, sdist


def version_in_source() -> str:
    """ibwire.__version__ as written in ibwire/__init__.py (pyproject.toml takes it from there)."""
    import re

    return re.search(r'^__version__ = "([^"]+)"', (ROOT / "ibwire" / "__init__.py").read_text(), re.M).group(1)


def run(python: Path, *args, cwd):
    exe = python.parent / "ibwire"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_build_gives_an_sdist_with_the_c_sources_and_a_wheel_with_the_compiled_part(installs):
    import tarfile
    import zipfile

    _, whl, sdist = installs
    sources = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if n.endswith((".c", ".h"))}
    tracked = subprocess.run(
        ["git", "ls-files", "ibwire/decode/native"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert sources == set(tracked)
    names = zipfile.ZipFile(whl).namelist()
    assert any(n.startswith("ibwire/decode/_native.") and n.endswith(".so") for n in names)
    assert "dissectors/opcodes.py" in names and not any(n.startswith("tests/") for n in names)


@pytest.mark.parametrize("how", ["pip install .", "wheel", "sdist"])
def test_installed_ibwire_reads_a_shipped_capture_with_its_compiled_part(installs, how, tmp_path, tshark):
    python = installs[0][how]
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import ibwire.decode._native as n, importlib.metadata as m; print(n.__file__); print(m.version('ibwire'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout.split()
    assert where[1] == version_in_source()
    r = run(python, "--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["ibwire", where[1]], r.stdout + r.stderr
    assert where[0].startswith(str(python.parent.parent))  # the venv's copy, not the source tree
    r = run(python, "stats", CAPTURE, "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    frames = subprocess.run(
        [tshark, "-r", str(CAPTURE), "-T", "fields", "-e", "frame.number"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert stats["summary"]["packets"] == len(frames)
    assert stats["counters"]["icrc_good"] == len(frames)
    assert list(tmp_path.iterdir()) == []
