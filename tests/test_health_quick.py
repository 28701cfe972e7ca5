"""`ibwire health` reads a plain command line without typer (cli/healthrun.quick, a faster start): it must
know exactly the options the typer command declares, and answer every command line as typer's reading does.
A long option spelled `--name=value` always goes through typer, so the two readings are compared on the
same command lines, output, errors and exit status alike."""

import inspect
from pathlib import Path

import pytest
from conftest import run_ibwire

from ibwire.cli import health as typer_health
from ibwire.cli.healthrun import OPTIONS, quick, run

CAPS = Path(__file__).resolve().parents[1] / "captures"


def _typer_options():
    """option spelling -> (run()'s parameter, type, default) as the typer command declares them."""
    out, defaults = {}, {}
    for name, p in inspect.signature(typer_health.health).parameters.items():
        info = p.default
        defaults[name] = info.default
        for spelling in getattr(info, "param_decls", None) or ():
            out[spelling] = (name, p.annotation)
    return out, defaults


def test_the_quick_reader_knows_exactly_the_typer_commands_options():
    declared, defaults = _typer_options()
    assert {k: v[0] for k, v in declared.items()} == {k: v[0] for k, v in OPTIONS.items()}
    for spelling, (_name, kind) in OPTIONS.items():
        annotation = declared[spelling][1]
        assert (
            kind is annotation
            or annotation == f"Optional[{kind.__name__}]"
            or kind in getattr(annotation, "__args__", ())
        ), spelling
    run_defaults = {k: p.default for k, p in inspect.signature(run).parameters.items()}
    assert run_defaults == defaults


def test_anything_unusual_is_left_to_typer():
    assert quick(["x.pcap", "--paths", "4"]) == {"file": "x.pcap", "paths": 4}
    for args in (
        ["--help"],
        ["x.pcap", "--paths", "four"],  # a value typer must refuse
        ["x.pcap", "--paths=4"],
        ["x.pcap", "--top", "3", "--top", "4"],
        ["x.pcap", "--no-such-option", "1"],
        ["--qos", "dscp=26"],  # no capture
        ["x.pcap", "--format"],
    ):
        assert quick(args) is None, args


def _long_equals(args):
    """The same command line with every long option joined to its value (typer's reading)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and i + 1 < len(args):
            out.append(f"{a}={args[i + 1]}")
            i += 2
        else:
            out.append(a)
            i += 1
    return out


@pytest.mark.parametrize(
    "args",
    [
        [str(CAPS / "pfc-storm.pcap"), "--qos", "dscp=26,cnp_dscp=48,pfc_priority=3", "--format", "json"],
        [str(CAPS / "pfc-storm.pcap"), "--storm-ms", "250", "--paths", "4", "--top", "3"],
        [str(CAPS / "congestion.pcap"), "--rate-window-us", "50", "--port-speed", "25G", "--format", "json"],
        [str(CAPS / "pfc-storm.pcap"), "--qos", "dscp=99"],
        [str(CAPS / "pfc-storm.pcap"), "--format", "yaml"],
        [str(CAPS / "pfc-storm.pcap"), "--storm-ms", "-1"],
        ["--read-file", str(CAPS / "no-such-capture.pcap")],
    ],
)
def test_both_readings_answer_alike(args):
    fast = run_ibwire("health", *args, unwrapped=True)
    slow = run_ibwire("health", *_long_equals(args), unwrapped=True)
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    assert fast.returncode in (0, 1, 2)


def test_both_readings_write_the_same_page(tmp_path):
    pages = [tmp_path / "quick.html", tmp_path / "typer.html"]
    a = run_ibwire("health", str(CAPS / "pfc-storm.pcap"), "--report", pages[0], unwrapped=True)
    b = run_ibwire("health", str(CAPS / "pfc-storm.pcap"), f"--report={pages[1]}", unwrapped=True)
    assert a.returncode == b.returncode == 1  # the storm is an error finding
    assert a.stdout.replace(str(pages[0]), "") == b.stdout.replace(str(pages[1]), "")
    assert pages[0].read_bytes() == pages[1].read_bytes()


def test_a_plain_command_line_starts_without_typer():
    """Otherwise the comparisons above would compare typer with itself."""
    import subprocess
    import sys

    code = (
        "import atexit, sys; atexit.register(lambda: print('typer' in sys.modules, file=sys.stderr)); "
        "from ibwire.cli import main; main()"
    )
    for args, typer_loaded in (
        ([str(CAPS / "congestion.pcap")], "False"),
        ([f"--read-file={CAPS / 'x.pcap'}"], "True"),
    ):
        res = subprocess.run([sys.executable, "-c", code, "health", *args], capture_output=True, text=True, timeout=120)
        assert res.stderr.splitlines()[-1] == typer_loaded, res.stderr
