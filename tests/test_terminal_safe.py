"""Text from packets and files never reaches the terminal raw: a node description or tenant name holding an
escape sequence is printed with its control characters escaped (ESC as the four characters `\\x1b`), rich
markup in a tenant name is printed as written, HTML stays escaped.  tshark is the oracle for the text
itself: unescaped, what `decode -V` shows is the string tshark decodes."""

import re
import subprocess

import pytest
from conftest import ROOT
from test_mad_crafted import smp
from test_mad_oracle import TSHARK, write_erf_pcap
from test_outputs_safe import cli

CAPS = ROOT / "captures"
BREACH = CAPS / "multitenant-breach"
EVIL = b"evil\x1b[31mRED\x1b]0;pwned\x07 node\n\t\x7f"  # colour, window title, bell, line break
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # control characters but the line ends


@pytest.fixture(scope="module")
def described(tmp_path_factory):
    """NodeInfo then NodeDescription, both answered from LID 2: a CA whose description is EVIL."""
    from dissectors.mad.smp import NodeDescription, NodeInfo

    info = smp(
        0x11,
        NodeInfo(
            nodetype=1,
            numports=1,
            systemimageguid=1,
            nodeguid=0x0002C90300001895,
            portguid=0x0002C90300001896,
            partitioncap=32,
            deviceid=0x1003,
            revision=0xA0,
            localportnum=1,
            vendorid=0x02C9,
        ),
        0x81,
    )
    desc = smp(0x10, NodeDescription(nodestring=EVIL), 0x81)
    path = tmp_path_factory.mktemp("cap") / "evil.pcap"
    write_erf_pcap(path, [info, desc])
    return path


def _run(capsys, *args):
    status = cli(*map(str, args))
    out = capsys.readouterr()
    assert "internal error" not in out.err
    return status, out


def test_decode_V_escapes_a_node_description_as_tshark_does(capsys, described):
    """-V writes the string as tshark -V does (C escapes, octal for the other controls), never raw."""
    status, out = _run(capsys, "decode", described, "-V")
    assert status == 0 and not RAW.search(out.out)
    line = next(ln for ln in out.out.splitlines() if "NodeString:" in ln)
    assert line.strip() == "NodeString: evil\\033[31mRED\\033]0;pwned\\a node\\n\\t\\177"
    theirs = subprocess.run([TSHARK, "-r", str(described), "-V"], capture_output=True, text=True, check=True).stdout
    assert line in theirs.splitlines()


def test_decode_T_fields_keeps_one_line_per_packet(capsys, described):
    """tshark -T fields escapes a line break and a tab in a string (they would split the row); ibwire also
    escapes ESC, BEL and DEL, which tshark prints raw."""
    status, out = _run(
        capsys, "decode", described, "-T", "fields", "-e", "nodedescription.nodestring", "-e", "frame.number"
    )
    assert status == 0 and not RAW.search(out.out.replace("\t", " "))  # the separator is a tab
    assert out.out.splitlines()[1] == "evil\\x1b[31mRED\\x1b]0;pwned\\a node\\n\\t\\x7f\t2"


@pytest.mark.parametrize("fmt", ["text", "ibnetdiscover", "dot"])
def test_fabric_output_escapes_a_node_description(capsys, described, fmt):
    status, out = _run(capsys, "fabric", described, "--format", fmt)
    assert status == 0 and not RAW.search(out.out.replace("\t", " "))  # ibnetdiscover's own tabs stay
    assert "evil\\x1b[31mRED\\x1b]0;pwned\\a node\\n\\t\\x7f" in out.out.replace("\\\\", "\\")


@pytest.fixture()
def odd_tenants(tmp_path):
    """The breach sample's tenants renamed: rich markup, an escape sequence, HTML."""
    text = BREACH.with_suffix(".tenants.toml").read_text()
    text = (
        text.replace("[tenants.tenantA]", '[tenants."[/bold]"]')
        .replace("[tenants.tenantB]", '[tenants."e\\u001b[31mvil"]')
        .replace("[tenants.storage]", '[tenants."<b>x</b>"]')
    )
    path = tmp_path / "odd.tenants.toml"
    path.write_text(text)
    return path


def test_audit_prints_markup_and_escapes_in_tenant_names_as_written(capsys, tmp_path, odd_tenants):
    """Before: a tenant named '[/bold]' was a rich MarkupError traceback (exit 3)."""
    args = ["audit", f"{BREACH}.pcap", "--policy", f"{BREACH}.partitions.conf", "--tenants", odd_tenants]
    status, out = _run(capsys, *args)
    assert status == 1 and not RAW.search(out.out)  # the sample's breaches
    assert "[/bold]" in out.out and "e\\x1b[31mvil" in out.out and "<b>x</b>" in out.out
    status, md = _run(capsys, *args, "--format", "md")
    assert status == 1 and not RAW.search(md.out) and "| **e\\x1b[31mvil** |" in md.out
    status, _ = _run(capsys, *args, "--format", "json", "--report", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert status == 1 and "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page


def test_an_error_naming_a_tenant_escapes_it(capsys, tmp_path):
    tenants = tmp_path / "t.toml"
    tenants.write_text('[tenants."e\\u001b[31mvil"]\nendpoints = [{ lid = 99999 }]\n')
    status, out = _run(capsys, "audit", f"{BREACH}.pcap", "--policy", f"{BREACH}.partitions.conf", "--tenants", tenants)
    assert status == 2 and out.out == ""
    assert out.err == f"ibwire: {tenants}:2: tenant 'e\\x1b[31mvil' endpoint 1: LID 99999 is outside 0x1..0xbfff\n"


@pytest.mark.parametrize("command", ["stats", "flows", "decode"])
def test_summaries_of_the_described_capture_send_no_control_character(capsys, described, command):
    status, out = _run(capsys, command, described)
    assert status == 0 and out.out and not RAW.search(out.out)
