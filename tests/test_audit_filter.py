"""`audit -Y`: the same strict display filters as decode/stats/flows/export. The audit of a filtered capture
sees exactly the frames tshark selects with that filter, judges only them, and says so."""

import json
import subprocess

from conftest import ROOT
from test_outputs_safe import cli

CAPS = ROOT / "captures"
BREACH = [
    "--policy",
    CAPS / "multitenant-breach.partitions.conf",
    "--tenants",
    CAPS / "multitenant-breach.tenants.toml",
]
# The breach between LID 18 (tenantA) and LID 33 (tenantB) in tenantA's partition, both directions.
NOT_BREACH = "!(bth.p_key == 0x8001 && lrh.slid in {18, 33} && lrh.dlid in {18, 33})"


def _audit(capsys, *args):
    status = cli("audit", CAPS / "multitenant-breach.pcap", *BREACH, *args)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_filtering_out_the_breach_traffic_turns_its_findings_off(capsys, tshark):
    """(The unfiltered sample's findings include this breach: test_audit_scenarios.)"""
    status, out, _ = _audit(capsys, "--format", "json", "-Y", NOT_BREACH)
    d = json.loads(out)
    assert not [
        f
        for f in d["findings"]
        if f["rule"] in ("cross-tenant-breach", "pkey-not-shared")
        and f.get("pkey") == "0x8001"
        and "LID 18" in f["description"]
        and "LID 33" in f["description"]
    ]
    # only the selected frames were audited: exactly the ones tshark selects with the same filter
    ws = NOT_BREACH.replace("bth.", "infiniband.bth.").replace("lrh.", "infiniband.lrh.")
    selected = subprocess.run(
        [tshark, "-r", CAPS / "multitenant-breach.pcap", "-Y", ws], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert d["frames"] == len(selected) == 231
    # the other breaches are still there, and the verdict says what it covers
    assert status == 1 and d["verdict"] == "FAIL"
    assert d["display_filter"] == NOT_BREACH and "only the frames matching" in d["scope"]


def test_a_filter_selecting_no_traffic_gives_no_verdict(capsys):
    status, out, _ = _audit(capsys, "-Y", "bth.destqp == 0xabcdef")
    assert status == 2 and "Display filter applied" in out and "bth.destqp == 0xabcdef" in out


def test_an_unknown_field_names_the_closest_one(capsys):
    status, out, err = _audit(capsys, "-Y", "bth.pkey == 0x8001")
    assert status == 2 and not out and "bth.p_key" in err


def test_a_pass_on_filtered_frames_is_no_bare_pass(capsys):
    status = cli(
        "audit",
        CAPS / "multitenant-clean.pcap",
        "--policy",
        CAPS / "multitenant-clean.partitions.conf",
        "--tenants",
        CAPS / "multitenant-clean.tenants.toml",
        "--format",
        "json",
        "-Y",
        "bth",
    )
    d = json.loads(capsys.readouterr().out)
    assert status == 4 and d["verdict"] == "PASS (evidence incomplete: only the frames matching 'bth' audited)"
