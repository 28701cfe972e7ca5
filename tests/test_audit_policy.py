"""partitions.conf read as opensm 3.3 reads it (doc/partition-config.txt examples, osm_prtn_config.c rules)."""
import pytest

from ibwire.audit.policy import PolicyError, Port, parse_policy

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
    assert p.membership(Port(0x123451))[0x80] == "full"          # defmember=full
    assert p.membership(Port(0x123453))[0x80] == "limited"       # default membership
    assert p.membership(Port(0x123455))[0x80] == "full"
    assert p.membership(Port(0x12345c))[0x80] == "limited"
    assert p.membership(Port(0x3456789034))[1] == "limited"      # '=limi' is a prefix of limited
    assert p.partitions[1].name == "NewPartition"                # P_Key generated from 1 upward
    assert p.membership(Port(0x999))[0x7FFF] == "full"           # the last Default statement: ALL=full
    assert p.membership(Port(0x999, is_sm=True))[0x300] == "limited"   # ALL=limited came after SELF=full
    groups = [g.mgid for g in p.partitions[0x7FFF].mgroups]
    assert groups == ["ff12:401b:ffff::707", "ff12::1"]          # IP group gets the partition's P_Key


def test_implicit_default_partition_and_both_membership():
    p = parse_policy("t=0x10 : 0x1=both, ALL_SWITCHES=full ;")
    assert p.expected_table(Port(0x1)) == {0x7FFF, 0x8010}               # both -> full without the option
    assert p.expected_table(Port(0x2, "switch")) == {0x7FFF, 0x8010}
    assert p.expected_table(Port(0x3, is_sm=True)) == {0xFFFF}          # SELF=full in Default
    both = parse_policy("t=0x10 : 0x1=both ;", allow_both_pkeys=True)
    assert both.expected_table(Port(0x1)) == {0x7FFF, 0x8010, 0x0010}


def test_continuation_lines_and_keywords_by_prefix():
    p = parse_policy("a=0x20, defmember=full :\n  0x5,\n  0x6=limited\n  ;\nb=0x21: A=limited;")
    assert p.membership(Port(0x5))[0x20] == "full" and p.membership(Port(0x6))[0x20] == "limited"
    assert p.membership(Port(0x7))[0x21] == "limited"           # 'A' is opensm's prefix match for ALL


@pytest.mark.parametrize("text,line,col", [
    ("a=0x10 : 0x1;\nb=zz : 0x2;", 2, 3),                       # bad P_Key
    ("a=0x10 :\n   0x1 0x2 ;", 2, 4),                           # two GUIDs without a comma
    ("a=0x10 : ALL_CAs=full;", 1, 10),                          # keywords are case-sensitive
    ("# fine\n  justtext 0x1 ;", 2, 3),                         # no ':' header
])
def test_parse_errors_name_line_and_column(text, line, col):
    with pytest.raises(PolicyError) as e:
        parse_policy(text, "p.conf")
    assert (e.value.line, e.value.col) == (line, col)
    assert str(e.value).startswith(f"p.conf:{line}:{col}:")
