"""State files and tenants.toml are checked with file:line errors before the audit trusts them: a negative
LID once made every breach finding disappear."""

import json

import pytest
from conftest import ROOT
from test_outputs_safe import cli

CAPS = ROOT / "captures"
BREACH = CAPS / "multitenant-breach"


@pytest.fixture(scope="module")
def fabric_json(tmp_path_factory):
    """`ibwire fabric --format json` of the breach sample's own SM sweep, as users feed it to --state."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("ibwire", path=str(Path(sys.executable).parent))
    text = subprocess.run(
        [exe, "fabric", f"{BREACH}.pcap", "--format", "json"], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(text)


def _audit(capsys, *extra):
    status = cli("audit", f"{BREACH}.pcap", "--policy", f"{BREACH}.partitions.conf", *extra, "--format", "json")
    return status, capsys.readouterr()


@pytest.mark.parametrize(
    "spoil,message",
    [
        (lambda p: p.update(lid=-5), "lid -5 is not a unicast LID (1-0xBFFF)"),
        (lambda p: p.update(lid=0xC001), "lid 49153 is not a unicast LID"),
        (lambda p: p.update(pkeys=["0x8001", "tenantA"]), 'pkeys "tenantA" is not a 16-bit P_Key'),
        (lambda p: p.update(pkeys=[0x18001]), "pkeys 98305 is not a 16-bit P_Key"),
        (lambda p: p.update(guid=-1), "guid -1 is not a 64-bit GUID"),
    ],
)
def test_state_file_values_out_of_range_name_their_line(tmp_path, capsys, fabric_json, spoil, message):
    doc = json.loads(json.dumps(fabric_json))
    port = next(i for i, p in enumerate(doc["ports"]) if p.get("lid"))
    spoil(doc["ports"][port])
    state = tmp_path / "state.json"
    text = json.dumps(doc, indent=2)
    state.write_text(text)
    status, out = _audit(capsys, "--tenants", f"{BREACH}.tenants.toml", "--state", state)
    assert status == 2 and not out.out
    where, _, said = out.err.strip().partition(": ")[2].partition(": ")
    line = int(where.rsplit(":", 1)[1])
    assert said == message or said.startswith(message), out.err
    key = message.split()[0]
    assert f'"{key}"' in text.splitlines()[line - 1] or key == "pkeys", (line, text.splitlines()[line - 1])


def test_intact_state_file_is_accepted(tmp_path, capsys, fabric_json):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(fabric_json, indent=2))
    status, out = _audit(capsys, "--tenants", f"{BREACH}.tenants.toml", "--state", state)
    assert status == 1 and json.loads(out.out)["verdict"] == "FAIL"  # the sample's breaches


@pytest.mark.parametrize(
    "text,line,message",
    [
        ("[tenants.a]\nendpoints = [\n  { lid = 7 },\n  { lid = -5 },\n]\n", 4, "LID -5 is outside 0x1..0xbfff"),
        (
            '[tenants.a]\nendpoints = [ { port_guid = "0x1_0000_0000_0000_0000" } ]\n',
            2,
            "port GUID '0x1_0000_0000_0000_0000' is outside",
        ),
        ("[tenants.a]\nendpoints = [ { vlan = 5000 } ]\n", 2, "VLAN 5000 is outside"),
        (
            '[tenants.a]\nendpoints = [ { port_guid = "0x0002c90300a1f000" } ]\n\n[tenants.b]\nendpoints = [\n'
            "  { lid = 3 },\n  { port_guid = 0x0002c90300a1f000 },\n]\n",
            7,
            "port GUID 0x0002c90300a1f000 is given to tenant 'a' (line 2) and to tenant 'b'",
        ),
        (
            '[[tenant]]\nname = "a"\nendpoints = [ { lid = 4 } ]\n[[tenant]]\nname = "b"\nendpoints = [ { lid = 4 } ]\n',
            6,
            "LID 4 is given to tenant 'a' (line 3) and to tenant 'b'",
        ),
        ("[tenants.a]\nendpoints = [ { lid = 1 }\n", 2, "fix the TOML syntax"),
    ],
)
def test_tenants_file_errors_name_their_line(tmp_path, capsys, text, line, message):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(text)
    status, out = _audit(capsys, "--tenants", tenants)
    assert status == 2 and not out.out
    assert out.err.startswith(f"ibwire: {tenants}:{line}: ") and message in out.err, out.err


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("src_qpn = 0x0021a0", "src_qpn = 0x1000000", "src_qpn 0x1000000 is outside 0x0..0xffffff"),
        ("lid = 0x21", "lid = -5", "lid -5 is not a unicast LID (1..0xbfff)"),
        ('guid = "0x0002c90300002101"', 'guid = "0x1_0000_0000_0000_0000"', "guid 0x10000000000000000 is outside"),
        ("count = 4", "count = -1", "count -1 is outside 0..1000000"),
        ("at_us = 200", "at_us = -200", "at_us -200 is outside 0..inf"),
        ("at_us = 300", "at_us = nan", "at_us nan is outside 0..inf"),
        ('link = "roce2"', 'rate_gbps = 0\nlink = "roce2"', "rate_gbps 0 is outside 0..inf"),
    ],
)
def test_scenario_values_out_of_range_name_their_line(tmp_path, capsys, old, new, message):
    text = (CAPS / "atomics.toml").read_text()
    line = text.splitlines().index(old) + 1
    scen = tmp_path / "s.toml"
    scen.write_text(text.replace(old + "\n", new + "\n", 1))
    assert cli("synth", scen, "-w", tmp_path / "out.pcap") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ibwire: {scen}:{line}: {message}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]
