"""partitions.conf read as opensm 3.3 reads it (doc/partition-config.txt examples, osm_prtn_config.c rules).
tests/test_audit_opensm_confs.py checks the same reading against real opensm file by file."""

import pytest

from ibwire.audit.policy import Port, parse_policy, policy_findings
from ibwire.audit.prtn_reader import strtoul

DOC_EXAMPLE = """
 Default=0x7fff : ALL, SELF=full ;
 NewPartition , ipoib : 0x123456=full, 0x3456789034=limi, 0x2134af2306 ;
 YetAnotherOne = 0x300 : SELF=full ;
 YetAnotherOne = 0x300 : ALL=limited ;
 ShareIO = 0x80 , defmember=full : 0x123451, 0x123452;
 # 0x123453, 0x123454 will be limited
 ShareIO = 0x80 : 0x123453, 0x123454, 0x123455=full;
 ShareIO = 0x80 , defmember=full : 0x12345b, 0x12345c=limited, 0x12345d;
 Default=0x7fff,ipoib:
        mgid=ff12:401b::0707,sl=1 # random IPv4 group
        mgid=ff12::1,sl=1,Q_Key=0xDEADBEEF,rate=3,mtu=2 # random group
        ALL=full;
"""


def test_doc_examples_give_the_memberships_the_doc_states():
    p = parse_policy(DOC_EXAMPLE)
    assert p.membership(Port(0x123451))[0x80] == "full"  # defmember=full
    assert p.membership(Port(0x123453))[0x80] == "limited"  # default membership
    assert p.membership(Port(0x123455))[0x80] == "full"
    assert p.membership(Port(0x12345C))[0x80] == "limited"
    assert p.membership(Port(0x3456789034))[1] == "limited"  # '=limi' is a prefix of limited
    assert p.partitions[1].name == "NewPartition"  # P_Key generated from 1 upward
    assert p.membership(Port(0x999))[0x7FFF] == "full"  # the last Default statement: ALL=full
    assert p.membership(Port(0x999, is_sm=True))[0x300] == "limited"  # ALL=limited came after SELF=full
    groups = [g.mgid for g in p.partitions[0x7FFF].mgroups]
    # ipoib: the broadcast group; an IP group gets the partition's full P_Key
    assert groups == ["ff12:401b:ffff::ffff:ffff", "ff12:401b:ffff::707", "ff12::1"]


def test_implicit_default_partition_and_both_membership():
    p = parse_policy("t=0x10 : 0x1=both, ALL_SWITCHES=full ;")
    assert p.expected_table(Port(0x1)) == {0x7FFF, 0x8010}  # both -> full without the option
    assert p.expected_table(Port(0x2, "switch")) == {0x7FFF, 0x8010}
    assert p.expected_table(Port(0x3, is_sm=True)) == {0xFFFF}  # SELF=full in Default
    both = parse_policy("t=0x10 : 0x1=both ;", allow_both_pkeys=True)
    assert both.expected_table(Port(0x1)) == {0x7FFF, 0x8010, 0x0010}


def test_continuation_lines_and_keywords_by_prefix():
    p = parse_policy("a=0x20, defmember=full :\n  0x5,\n  0x6=limited\n  ;\nb=0x21: A=limited;")
    assert p.membership(Port(0x5))[0x20] == "full" and p.membership(Port(0x6))[0x20] == "limited"
    assert p.membership(Port(0x7))[0x21] == "limited"  # 'A' is opensm's prefix match for ALL


@pytest.mark.parametrize(
    "text,line",
    [
        ("a=0x10 : 0x1;\nb=zz : 0x2;", 2),  # bad P_Key
        ("a=0x10 :\n   0x1 0x2 ;", 2),  # two GUIDs without a comma
        ("a=0x10 : ALL_CAs=full;", 1),  # keywords are case-sensitive
        ("# fine\n  justtext 0x1 ;", 2),  # no ':' header
        ("a=0x10 : 0x0 ;", 1),  # GUID 0
    ],
)
def test_a_file_opensm_rejects_is_evaluated_as_its_fallback_and_said_so(text, line):
    p = parse_policy(text, "p.conf")
    assert p.expected_table(Port(0x1)) == {0xFFFF}  # Default=0x7fff : ALL=full
    assert p.expected_table(Port(0x2, "switch")) == {0xFFFF}
    assert list(p.partitions) == [0x7FFF]
    [f] = policy_findings(p)
    assert (f.rule, f.severity, f.line) == ("policy-fallback", "breach", line)
    assert f.description.startswith(f"p.conf:{line}: PARSE ERROR: line {line}:") and "ALL=full" in f.description


def test_empty_file_is_not_processed_so_opensm_falls_back():
    p = parse_policy("# nothing but comments\n\n", "p.conf")
    assert p.fallback and p.expected_table(Port(0x1)) == {0xFFFF}
    assert [f.rule for f in policy_findings(p)] == ["policy-fallback"]


@pytest.mark.parametrize(
    "text,value,used",
    [
        ("0x10", 16, 4),
        ("010", 8, 3),
        ("08", 0, 1),
        ("0x", 0, 1),
        ("  +7", 7, 4),
        ("-1", (1 << 64) - 1, 2),
        ("99999999999999999999999", (1 << 64) - 1, 23),
        ("12abc", 12, 2),
        ("", 0, 0),
        ("x", 0, 0),
    ],
)
def test_numbers_follow_c_strtoul_base_0(text, value, used):
    assert strtoul(text) == (value, used)


def test_truncated_pkey_that_lands_in_another_tenants_partition_is_a_breach():
    p = parse_policy("blue=0x0002 : 0x7=full ;\nred=0x18002 : 0x1=full ;\n")
    assert p.membership(Port(0x1)) == {0x7FFF: "limited", 0x2: "full"}
    merged = [f for f in policy_findings(p) if f.severity == "breach"]
    assert [f.line for f in merged] == [2] and "'blue'" in merged[0].description


def test_empty_membership_word_is_full_and_a_breach():
    p = parse_policy("m=0x30 : 0x1=, 0x2=Full ;")
    assert p.membership(Port(0x1))[0x30] == "full" and p.membership(Port(0x2))[0x30] == "limited"
    sev = {f.description.split("'")[1]: f.severity for f in policy_findings(p)}
    assert sev == {"0x1=": "breach", "0x2=Full": "warning"}


def test_mgid_item_consumes_the_rest_of_its_line():
    p = parse_policy("g=0x70, ipoib : mgid=ff12:401b::1, 0x1=full\n , 0x2=full ;")
    assert 0x70 not in p.membership(Port(0x1)) and p.membership(Port(0x2))[0x70] == "full"
    assert sorted(g.mgid for g in p.partitions[0x70].mgroups) == ["ff12:401b:8070::1", "ff12:401b:8070::ffff:ffff"]


def test_any_bytes_give_a_policy_never_an_exception():
    """Bad input never crashes: mutated files and random bytes are read as opensm would (or its fallback)."""
    import random

    rnd = random.Random(7)
    base = DOC_EXAMPLE.encode()
    alphabet = b"aAS=0x17,:;# \t\n\r-+mgid=ff12::1\0\xff"
    for i in range(400):
        data = bytearray(base) if i % 2 else bytearray()
        for _ in range(rnd.randint(1, 40)):
            data.insert(rnd.randrange(len(data) + 1), rnd.choice(alphabet))
        p = parse_policy(bytes(data), "m.conf", allow_both_pkeys=i % 3 == 0)
        assert 0x7FFF in p.partitions
        assert all(f.rule.startswith("policy-") for f in policy_findings(p))
        p.expected_table(Port(0x123451, "ca", i % 5 == 0))
