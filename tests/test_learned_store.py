"""Programs learned in one run print the next runs' documents at once (ibwire.report.packets.learned_store):
byte for byte what a run without them prints, on every sample and public capture, in -V, -T json, -T ek and
jsonl; and the cache directory is used only where a root run can trust it (a directory, file or link of
another user, or a file that is not whole, means no cache, and the output is the same)."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from merged_pcapng import merge

from ibwire.report.packets import learned_store
from ibwire.report.packets.program import AUX, compile_parts, valid

EXE = str(Path(sys.executable).parent / "ibwire")
FORMATS = {"tree": ["-V"], "json": ["-T", "json"], "ek": ["-T", "ek"], "jsonl": ["-T", "jsonl"]}
SWEEP = ROOT / "captures" / "sm-sweep.pcap"
NOBODY = 65534


def decode(cache, capture, fmt: str, home=None) -> bytes:
    env = {**os.environ, learned_store.cachedir.ENV: str(cache)}
    if home is not None:
        env.pop(learned_store.cachedir.ENV)
        env.pop("XDG_CACHE_HOME", None)
        env["HOME"] = str(home)
    run = subprocess.run([EXE, "decode", *FORMATS[fmt], str(capture)], capture_output=True, env=env, timeout=300)
    assert run.returncode == 0 and not run.stderr, run.stderr.decode()[-2000:]
    return run.stdout


@pytest.fixture(scope="module")
def everything(tmp_path_factory, public_dir):
    """Every sample and public capture in one pcapng (tests/merged_pcapng.py)."""
    caps = sorted((ROOT / "captures").glob("*.pcap")) + sorted(public_dir.glob("*.pcap"))
    return merge(tmp_path_factory.mktemp("all") / "all.pcapng", caps)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """SM sweeps enough for its MADs' shapes to be learned, and the tree programs one run keeps of them."""
    d = tmp_path_factory.mktemp("sweep")
    cap = merge(d / "sweeps.pcapng", [SWEEP] * 20)
    cache = d / "cache"
    text = decode(cache, cap, "tree")
    (kept,) = cache.iterdir()
    return cap, cache, kept, text


@pytest.mark.parametrize("fmt", FORMATS)
def test_kept_programs_print_what_a_run_without_them_prints(everything, tmp_path, fmt):
    """The first run learns and keeps programs, the second prints every shape it knows from its first frame:
    what the first printed."""
    cache = tmp_path / "cache"
    plain = decode(cache, everything, fmt)  # (an empty cache: what a run without one prints, its programs kept)
    (kept,) = cache.iterdir()
    assert kept.name.startswith(f"{fmt}-") and kept.stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    before = _programs(kept)
    assert decode(cache, everything, fmt) == plain
    assert before <= _programs(kept)  # (a layout known from its first frame may count a shape's frames to learn it)


def _programs(kept: Path) -> set:
    return {
        (row[0], masked, program)
        for row in json.loads(kept.read_bytes())["layouts"]
        for masked, program in row[3].items()
    }


def _planted(kept: Path, dest: Path) -> None:
    """`kept`'s file at `dest` with every program replaced by one that prints PLANTED."""
    doc = json.loads(kept.read_bytes())
    planted = compile_parts(["PLANTED\n"], AUX)
    for row in doc["layouts"]:
        row[3] = {m: base64.b64encode(planted).decode() for m in row[3]}
    dest.write_text(json.dumps(doc))
    dest.chmod(0o600)


def test_a_kept_program_is_what_prints(swept, tmp_path):
    """The control for the tests below: a trusted file's programs are the ones used."""
    cap, _, kept, text = swept
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _planted(kept, cache / kept.name)
    assert b"PLANTED\n" in decode(cache, cap, "tree")


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another user are made by root")
@pytest.mark.parametrize("whose", ["directory", "file", "link on the way", "group-writable directory"])
def test_programs_another_user_could_have_written_are_not_used(swept, tmp_path, whose):
    """As root: a cache directory that is another user's or writable by others, or is reached through another
    user's symbolic link, is neither read nor written; a file of another user in it is not read."""
    cap, _, kept, text = swept
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _planted(kept, cache / kept.name)
    used = cache
    if whose == "directory":
        os.chown(cache, NOBODY, NOBODY)
    elif whose == "file":
        os.chown(cache / kept.name, NOBODY, NOBODY)
    elif whose == "group-writable directory":
        cache.chmod(0o770)
    else:
        (tmp_path / "link").symlink_to(cache)
        os.lchown(tmp_path / "link", NOBODY, NOBODY)
        used = tmp_path / "link"
    planted = (cache / kept.name).read_bytes()
    assert decode(used, cap, "tree") == text
    if whose == "file":  # (not read; the run's own file replaces it, renamed over it in the run's directory)
        assert (cache / kept.name).stat().st_uid == os.geteuid()
        assert (cache / kept.name).read_bytes() == kept.read_bytes()
    else:
        assert (cache / kept.name).read_bytes() == planted and len(list(cache.iterdir())) == 1


@pytest.mark.parametrize("damage", ["cut short", "not JSON", "another layout", "a program past its end", "wide digits"])
def test_a_damaged_file_is_ignored_and_replaced(swept, tmp_path, damage):
    """A file that is not whole (a disk that filled, a crash before the rename the writer does) or holds a
    program render.c could not print is ignored: the output is a run's without it, and the run writes
    what it learned in its place."""
    cap, _, kept, text = swept
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    good = kept.read_bytes()
    doc = json.loads(good)
    bad = {
        "cut short": good[: len(good) // 2],
        "not JSON": b"\x00" * 64,
        "another layout": json.dumps({**doc, "ibwire learned programs": 99}).encode(),
    }.get(damage)
    if bad is None:
        program = bytearray(compile_parts(["x", ("fint", 0, 2, 0, 16, 4)], AUX))
        program[-1 if damage == "wide digits" else 1] = 200  # 200 hex digits; a literal of 200 bytes
        assert not valid(bytes(program))
        doc["layouts"][0][3] = {m: base64.b64encode(program).decode() for m in doc["layouts"][0][3]}
        bad = json.dumps(doc).encode()
    (cache / kept.name).write_bytes(bad)
    (cache / kept.name).chmod(0o600)
    assert decode(cache, cap, "tree") == text
    assert (cache / kept.name).read_bytes() == good


def test_the_default_place_is_made_private_and_an_empty_setting_keeps_nothing(swept, tmp_path):
    """Without IBWIRE_CACHE the programs go to ~/.cache/ibwire (mode 0700, made where missing; never the home
    folder itself); IBWIRE_CACHE= (empty) keeps nothing anywhere."""
    cap, _, kept, text = swept
    home = tmp_path / "home"
    home.mkdir()
    assert decode(None, cap, "tree", home=home) == text
    assert (home / ".cache" / "ibwire" / kept.name).is_file()
    assert (home / ".cache").stat().st_mode & 0o777 == 0o700
    assert decode(None, cap, "tree", home=tmp_path / "no-such-home") == text
    assert not (tmp_path / "no-such-home").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    run = subprocess.run(
        [EXE, "decode", "-V", str(cap)],
        capture_output=True,
        env={**os.environ, "HOME": str(empty), learned_store.cachedir.ENV: ""},
        cwd=empty,
        timeout=300,
    )
    assert run.returncode == 0 and run.stdout == text and not (empty / ".cache" / "ibwire").exists()
