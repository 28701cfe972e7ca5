"""Every configuration file is read strictly before anything is judged: an unknown key or a value of the
wrong type is `FILE:LINE:` and the closest key, exit 2, nothing printed on standard output; oversized or
over-nested files are one sentence; no input of any kind ends in a traceback (each former crash has its
case, and a fuzz test per parser).  An audit that judged no tenant pair, or read a capture cut inside a
record, is never a bare PASS (exit 4, saying why)."""

import json
import re

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_outputs_safe import cli

CAPS = ROOT / "captures"
BREACH = CAPS / "multitenant-breach"
CLEAN = CAPS / "multitenant-clean"
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _audit(capsys, *args):
    status = cli("audit", *map(str, args))
    out = capsys.readouterr()
    assert "internal error" not in out.err and "Traceback" not in out.err, out.err
    return status, out


def _line_of(text: str, pattern: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if re.search(pattern, ln))


# -- tenants.toml -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "old,new,where,message",
    [
        (
            'endpoints = [\n  { name = "vm1"',
            'endpoint = [\n  { name = "vm1"',
            r"^endpoint =",
            "tenant 'tenantA': 'endpoint' is not a key; did you mean 'endpoints'?",
        ),
        (
            '{ name = "stor1", host',
            '{ nmae = "stor1", host',
            "nmae",
            "tenant 'storage' endpoint 1: 'nmae' is not a key; did you mean 'name'?",
        ),
        (
            "[tenants.tenantA]",
            "tennants = 1\n[tenants.tenantA]",
            "tennants",
            "'tennants' is not a key of tenants.toml; did you mean 'tenants'? (tenants are [tenants.NAME] tables)",
        ),
        (
            '{ name = "stor1", host = "storage1"',
            '{ name = "stor1", host = 7',
            "stor1",
            "tenant 'storage' endpoint 1: host must be a string, not an integer (7)",
        ),
    ],
    ids=["endpoint", "nmae", "tennants", "host-type"],
)
def test_a_misspelt_or_mistyped_tenants_key_is_refused_at_its_line(tmp_path, capsys, old, new, where, message):
    """Before: `endpoint =` was ignored, the tenant had no endpoint and its breach went unjudged."""
    text = BREACH.with_suffix(".tenants.toml").read_text()
    assert old in text
    text = text.replace(old, new, 1)
    tenants = tmp_path / "t.toml"
    tenants.write_text(text)
    status, out = _audit(capsys, f"{BREACH}.pcap", "--policy", f"{BREACH}.partitions.conf", "--tenants", tenants)
    assert status == 2 and out.out == ""
    assert out.err == f"ibwire: {tenants}:{_line_of(text, where)}: {message}\n"


# -- fabric state JSON ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def state_doc():
    from ibwire.analyze.fabric import fabric_view

    return json.loads(json.dumps(fabric_view(f"{BREACH}.pcap")))


@pytest.mark.parametrize(
    "spoil,key,message",
    [
        (
            lambda d: d["ports"][2].update(pkey=d["ports"][2].pop("pkeys")),
            '"pkey"',
            "'pkey' is not a key of a port; did you mean 'pkeys'?",
        ),
        (lambda d: d.update(sm=[d["sm"]]), '"sm"', "sm must be an object, not a list"),  # was a traceback
        (lambda d: d["nodes"][1].update(description=5), '"description": 5', "description 5 is not a string"),
        (lambda d: d["ports"][1].update(pkeys=[None]), None, "pkeys holds null; give a number"),
        (lambda d: d["sm"]["seen"][0].update(guid=[1]), None, "guid [1] is not a number"),
    ],
    ids=["pkey", "sm-list", "description-type", "null-pkey", "guid-list"],
)
def test_state_json_keys_and_types_are_checked_at_their_line(tmp_path, capsys, state_doc, spoil, key, message):
    doc = json.loads(json.dumps(state_doc))
    spoil(doc)
    text = json.dumps(doc, indent=2)
    state = tmp_path / "state.json"
    state.write_text(text)
    status, out = _audit(
        capsys,
        f"{BREACH}.pcap",
        "--policy",
        f"{BREACH}.partitions.conf",
        "--tenants",
        f"{BREACH}.tenants.toml",
        "--state",
        state,
    )
    assert status == 2 and out.out == ""
    where, said = re.match(rf"ibwire: {re.escape(str(state))}:(\d+): (.*)\n$", out.err).groups()
    assert said == message
    if key:
        assert key in text.splitlines()[int(where) - 1]


@pytest.mark.parametrize("name", ["multitenant-breach", "sm-sweep", "congestion-ib", "ud-ipoib"])
def test_what_ibwire_fabric_writes_is_a_valid_state_file(tmp_path, capsys, name):
    """The schema is the one `ibwire fabric --format json` writes: its output of every capture with SMPs
    reads back (a key added to the fabric JSON must be added to audit/state.py's schema too)."""
    from ibwire.audit.state import from_fabric_json

    assert cli("fabric", CAPS / f"{name}.pcap", "--format", "json") == 0
    state = tmp_path / "state.json"
    state.write_text(capsys.readouterr().out)
    assert from_fabric_json(str(state)).sources


# -- scenarios --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "old,new,message",
    [
        ("at_us = 200", "at_ms = 200", "'at_ms' is not a key of [op]; did you mean 'at_us'?"),
        ('name = "node1"', 'nmae = "node1"', "'nmae' is not a key of [port]; did you mean 'name'?"),
        ('qp = "at"', 'qp = ["at"]', "qp must be a string, not a list (['at'])"),
    ],
    ids=["at_ms", "nmae", "qp-list"],
)
def test_scenario_keys_and_types_are_checked_at_their_line(tmp_path, capsys, old, new, message):
    text = (CAPS / "atomics.toml").read_text()
    assert old + "\n" in text
    line = text.splitlines().index(old) + 1
    scen = tmp_path / "s.toml"
    scen.write_text(text.replace(old + "\n", new + "\n", 1))
    assert cli("synth", scen, "-w", tmp_path / "out.pcap") == 2
    assert capsys.readouterr().err == f"ibwire: {scen}:{line}: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_a_fault_takes_only_the_keys_of_its_kind(tmp_path, capsys):
    text = (CAPS / "loss-retransmit.toml").read_text()
    scen = tmp_path / "s.toml"
    scen.write_text(text.replace("packet = 10\n", "pakcet = 10\n", 1))
    assert cli("synth", scen, "-w", tmp_path / "out.pcap") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ibwire: {scen}:") and err.endswith(
        "'pakcet' is not a key of [fault]; did you mean 'packet'?\n"
    )


@pytest.mark.parametrize(
    "old,new", [("at_us = 200", "at_us = 1e300"), ("[scenario]", "[scenario]\nstart = 1e300")], ids=["at_us", "start"]
)
def test_a_time_past_what_a_capture_holds_is_one_sentence(tmp_path, capsys, old, new):
    """Before: struct.error ('argument out of range'), exit 3."""
    text = (CAPS / "atomics.toml").read_text()
    text = re.sub(r"(?m)^start = .*\n", "", text) if "start" in new else text
    scen = tmp_path / "s.toml"
    scen.write_text(text.replace(old + "\n", new + "\n", 1))
    assert cli("synth", scen, "-w", tmp_path / "out.pcap") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("2106" in err or "outside 0..4294967295" in err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


# -- partitions.conf --------------------------------------------------------------------------------------
def test_a_misspelt_partition_word_is_refused_at_its_line_with_the_word_it_looks_like(tmp_path, capsys):
    """opensm silently ignores a flag or membership it does not know, so a typo would quietly narrow or widen a
    partition: without --as-opensm the audit refuses the file at the word's line and names the word meant."""
    conf = tmp_path / "p.conf"
    conf.write_text("Default=0x7fff : ALL=full ;\nr=0x10, ipiob : ALL=fulll ;\n")
    status, out = _audit(capsys, f"{CLEAN}.pcap", "--policy", conf, "--tenants", f"{CLEAN}.tenants.toml")
    assert status == 2 and out.out == ""
    assert f"{conf}:2: partition flag 'ipiob'" in out.err and "(a misspelt 'ipoib'?)" in out.err
    assert "--as-opensm" in out.err and out.err.count("\n") == 1


def test_as_opensm_audits_what_opensm_programs_and_names_each_word(tmp_path, capsys):
    """With --as-opensm the audit judges what opensm programs from the file as written, and its
    policy-reading findings name the words the text looks misspelt from."""
    conf = tmp_path / "p.conf"
    conf.write_text("r=0x10, ipiob : ALL=fulll ;\n")
    status, out = _audit(
        capsys,
        f"{CLEAN}.pcap",
        "--policy",
        conf,
        "--tenants",
        f"{CLEAN}.tenants.toml",
        "--format",
        "json",
        "--as-opensm",
    )
    said = [f["description"] for f in json.loads(out.out)["findings"] if f["rule"] == "policy-reading"]
    assert any("partition flag 'ipiob'" in s and "(a misspelt 'ipoib'?)" in s for s in said), said
    assert any("'ALL=fulll'" in s and "(a misspelt 'full'?)" in s for s in said), said


# -- sizes and depths -------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["tenants", "state", "scenario", "policy"])
@pytest.mark.parametrize("how", ["deep", "large"])
def test_over_deep_or_over_large_files_are_one_sentence(tmp_path, capsys, which, how):
    """Before: a RecursionError traceback (exit 3) on a TOML or JSON list nested 100,000 deep."""
    f = tmp_path / ("in.json" if which == "state" else "in.conf" if which == "policy" else "in.toml")
    if how == "deep":
        f.write_text(
            '{"ports": ' + "[" * 100_000 + "]" * 100_000 + "}"
            if which == "state"
            else "a = " + "[" * 100_000 + "]" * 100_000 + "\n"
        )
    else:
        f.write_bytes(b"# " + b"x" * (16 << 20) + b"\n")
    if which == "scenario":
        status = cli("synth", f, "-w", tmp_path / "out.pcap")
        err = capsys.readouterr().err
    else:
        opts = {
            "tenants": ["--policy", f"{BREACH}.partitions.conf", "--tenants", f],
            "state": ["--policy", f"{BREACH}.partitions.conf", "--state", f],
            "policy": ["--policy", f],
        }[which]
        status, out = _audit(capsys, f"{BREACH}.pcap", *opts)
        err = out.err
    if which == "policy" and how == "deep":  # brackets mean nothing to opensm's grammar: a finding
        assert status in (1, 4) and err.count("\n") <= 1
        return
    assert status == 2 and err.count("\n") == 1, err
    assert ("nested more than 32 deep" if how == "deep" else "larger than 16 MiB") in err


# -- no verdict on nothing --------------------------------------------------------------------------------
def test_an_audit_that_judged_no_tenant_pair_is_not_a_pass(tmp_path, capsys):
    """Before: without --tenants a clean capture audited PASS, exit 0, having judged no tenant at all."""
    base = ["audit", f"{CLEAN}.pcap", "--policy", f"{CLEAN}.partitions.conf", "--format", "json"]
    assert cli(*base, "--tenants", f"{CLEAN}.tenants.toml") == 0  # tenants judged: a pass
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"
    empty = tmp_path / "t.toml"
    empty.write_text("[tenants.a]\nendpoints = []\n")
    for extra, why in (
        ([], "no tenant is declared with --tenants"),
        (["--tenants", empty], "no declared tenant has an endpoint"),
    ):
        assert cli(*base, *extra) == 4
        out = capsys.readouterr()
        doc = json.loads(out.out)
        assert doc["verdict"] == f"PASS (evidence incomplete: no tenant pair judged: {why})"
        assert out.err == f"ibwire: {doc['verdict']}\n"
        assert doc["checks"]["not_run"] == {"tenant × tenant isolation": why}
        assert "P_Key membership of the traffic" in doc["checks"]["ran"]
    status, out = _audit(capsys, f"{CLEAN}.pcap", "--policy", f"{CLEAN}.partitions.conf")
    assert status == 4 and "Not run: tenant × tenant isolation (no tenant is declared with --tenants)" in " ".join(
        out.out.split()
    )


def test_a_state_only_audit_that_found_no_table_is_not_a_pass(tmp_path, capsys):
    """No capture and a sysfs without RDMA ports: only the policy was read, so a pass would mean nothing."""
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    status, out = _audit(
        capsys,
        "--policy",
        f"{CLEAN}.partitions.conf",
        "--tenants",
        f"{CLEAN}.tenants.toml",
        "--state",
        f"sysfs:{tmp_path}",
        "--format",
        "json",
    )
    assert status == 4
    assert (
        json.loads(out.out)["verdict"] == "PASS (evidence incomplete: nothing judged but the policy: no capture "
        "given and no programmed P_Key table known)"
    )


def test_a_capture_cut_inside_its_last_record_is_incomplete_evidence(tmp_path, capsys):
    """Before: the cut record counted as a snap-length truncation and the audit said a bare PASS, exit 0."""
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(CLEAN.with_suffix(".pcap").read_bytes()[:-20])
    status, out = _audit(
        capsys, cut, "--policy", f"{CLEAN}.partitions.conf", "--tenants", f"{CLEAN}.tenants.toml", "--format", "json"
    )
    doc = json.loads(out.out)
    assert status == 4 and doc["evidence"]["complete"] is False
    assert doc["verdict"] == f"PASS (evidence incomplete: {cut} ends inside frame 199 (20 bytes of it missing))"


# -- decode -w --------------------------------------------------------------------------------------------
def test_decode_to_pcapng_of_a_link_type_with_reserved_bits_is_one_sentence(tmp_path, capsys):
    """Before: struct.error (ushort format requires 0 <= number <= 65535), exit 3."""
    raw = bytearray(CLEAN.with_suffix(".pcap").read_bytes())
    raw[22] |= 0x01  # bit 16 of the link-type field: reserved
    src = tmp_path / "rsv.pcap"
    src.write_bytes(raw)
    assert cli("decode", src, "-w", tmp_path / "out.pcapng") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "link type 0x100c5" in err and "write it to a .pcap file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rsv.pcap"]


# -- fuzz: a parse result or the project's input error, never another exception ----------------------------
VALUES = [
    "[]",
    "{}",
    "[[1]]",
    "{ a = 1 }",
    "1e300",
    "-1",
    "0",
    "nan",
    "inf",
    '"x"',
    '"0x1_0000_0000_0000_0000"',
    "true",
    '"\\u001b[31m"',
    '"[/bold]"',
    "2023-01-01",
    "99999999999999999999999",
    '""',
    "'ALL'",
]


def _mutate(text: str, data) -> str:
    """A few edits of a real file: a value replaced, a key misspelt, a line dropped, doubled or cut."""
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        if not lines:
            break
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["value", "key", "drop", "double", "cut", "insert"]))
        ln = lines[i]
        if how == "value" and "=" in ln:
            lines[i] = ln.split("=", 1)[0] + "= " + data.draw(st.sampled_from(VALUES))
        elif how == "key" and "=" in ln and ln.split("=", 1)[0].strip():
            key = ln.split("=", 1)[0].strip()
            j = data.draw(st.integers(0, len(key) - 1))
            lines[i] = ln.replace(key, key[:j] + data.draw(st.sampled_from("xe_")) + key[j + 1 :], 1)
        elif how == "drop":
            del lines[i]
        elif how == "double":
            lines.insert(i, ln)
        elif how == "cut":
            lines[i] = ln[: data.draw(st.integers(0, len(ln)))]
        else:
            lines.insert(i, data.draw(st.text(max_size=20)))
    return "\n".join(lines) + "\n"


@FUZZ
@given(data=st.data())
def test_fuzz_tenants_parser(data):
    from ibwire.audit.tenants import parse_tenants
    from ibwire.errors import UserError

    name = data.draw(st.sampled_from(["multitenant-breach", "roce-multitenant-breach"]))
    text = _mutate((CAPS / f"{name}.tenants.toml").read_text(), data)
    try:
        parse_tenants(text, "t.toml")
    except UserError as e:  # InputError included: FILE:LINE: sentence
        assert str(e)


@FUZZ
@given(data=st.data())
def test_fuzz_state_parser(tmp_path, state_doc, data):
    from ibwire.audit.state import from_fabric_json
    from ibwire.errors import UserError

    doc = json.loads(json.dumps(state_doc))
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
        max_leaves=6,
    )
    for _ in range(data.draw(st.integers(1, 3))):  # a value anywhere replaced, or a key added
        node, path = doc, []
        while isinstance(node, (dict, list)) and node and data.draw(st.booleans()):
            k = data.draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
            path.append((node, k))
            node = node[k]
        if path:
            parent, k = path[-1]
            parent[k] = data.draw(json_values)
        elif isinstance(doc, dict):
            doc[data.draw(st.text(max_size=8))] = data.draw(json_values)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(doc, indent=data.draw(st.sampled_from([None, 1]))))
    try:
        from_fabric_json(str(state))
    except UserError as e:  # InputError included: FILE:LINE: sentence
        assert str(e)


@FUZZ
@given(data=st.data())
def test_fuzz_scenario_parser(tmp_path, data):
    from ibwire.errors import UserError
    from ibwire.synth.scenario import load

    name = data.draw(st.sampled_from(["atomics", "loss-retransmit", "multitenant-breach", "ud-ipoib"]))
    scen = tmp_path / "s.toml"
    scen.write_text(_mutate((CAPS / f"{name}.toml").read_text(), data))
    try:
        load(scen)
    except UserError as e:  # InputError included: FILE:LINE: sentence
        assert str(e)


@FUZZ
@given(data=st.data())
def test_fuzz_partitions_parser(data):
    """opensm's grammar accepts any bytes: every file gives a policy (maybe opensm's fallback) and findings."""
    from ibwire.audit.policy import parse_policy, policy_findings

    confs = sorted((ROOT / "tests" / "audit" / "confs").glob("*.conf"))
    text = _mutate(data.draw(st.sampled_from(confs)).read_text(errors="replace"), data)
    raw = text.encode("latin-1", "replace")
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(raw)))
        raw = raw[:at] + data.draw(st.binary(max_size=16)) + raw[at:]
    policy = parse_policy(raw, "p.conf", data.draw(st.booleans()))
    policy_findings(policy)


WHOLE = settings(FUZZ, max_examples=30)


def _mutated_state(doc, data) -> dict:
    """The state document with a few leaf values replaced by numbers, text, null or booleans."""
    doc = json.loads(json.dumps(doc))
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats()
        | st.text(max_size=6)
        | st.sampled_from(["0x10", "0x8001", "MASTER", "read", "Switch", "2"])
    )
    for _ in range(data.draw(st.integers(1, 4))):
        node, path = doc, []
        while isinstance(node, (dict, list)) and node and data.draw(st.booleans()):
            k = data.draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
            path.append((node, k))
            node = node[k]
        if path and not isinstance(node, (dict, list)):
            path[-1][0][path[-1][1]] = data.draw(leaves)
    return doc


@WHOLE
@given(data=st.data())
def test_fuzzed_tenants_and_state_go_through_the_audit_without_a_traceback(tmp_path, capsys, state_doc, data):
    """What the parsers accept, the audit judges without an internal error (exit 0, 1, 4) or refuses (2)."""
    name = data.draw(st.sampled_from(["multitenant-breach", "roce-multitenant-breach"]))
    tenants, state = tmp_path / "t.toml", tmp_path / "s.json"
    tenants.write_text(_mutate((CAPS / f"{name}.tenants.toml").read_text(), data))
    extra = []
    if name == "multitenant-breach" and data.draw(st.booleans()):
        state.write_text(json.dumps(_mutated_state(state_doc, data)))
        extra = ["--state", state]
    status, out = _audit(
        capsys,
        CAPS / f"{name}.pcap",
        "--policy",
        CAPS / f"{name}.partitions.conf",
        "--tenants",
        tenants,
        *extra,
        "--format",
        "json",
    )
    assert status in (0, 1, 2, 4)


@WHOLE
@given(data=st.data())
def test_fuzzed_scenarios_synthesise_or_are_refused(tmp_path, capsys, data):
    name = data.draw(
        st.sampled_from(["atomics", "loss-retransmit", "multitenant-breach", "ud-ipoib", "congestion", "roce-v6-vlan"])
    )
    scen = tmp_path / "s.toml"
    scen.write_text(_mutate((CAPS / f"{name}.toml").read_text(), data))
    status = cli("synth", scen, "-w", tmp_path / "out.pcap")
    err = capsys.readouterr().err
    assert status in (0, 2) and "internal error" not in err, err


def test_shipped_files_still_parse():
    """The strict readers accept every file the project ships (captures, tests)."""
    from ibwire.audit.policy import load_policy
    from ibwire.audit.tenants import load_tenants
    from ibwire.synth.scenario import load

    for t in sorted(CAPS.glob("*.tenants.toml")) + sorted((ROOT / "tests" / "audit").glob("*tenants.toml")):
        assert load_tenants(str(t)).names
    for s in sorted(CAPS.glob("*.toml")):
        if not s.name.endswith(".tenants.toml"):
            assert load(s).ports
    for c in sorted(CAPS.glob("*.partitions.conf")):
        assert load_policy(str(c)).partitions
