"""`ibwire decode -T fields|json|ek` write what tshark 4.0 writes, so a script, jq filter or Kibana pipeline
made for tshark reads ibwire's output unchanged.  tshark itself is run on every public capture and every
shipped one; nothing expected here comes from ibwire.

tshark 4.0 is wrong on a few packets (each case below says why); those packets are compared without the
fields it gets wrong, never left out entirely.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tshark_runs
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from test_mad_oracle import TSHARK_EXCEPTIONS
from tshark_oracle import PUBLIC, TSHARK

from dissectors.opcodes import OPCODES

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = sorted(PUBLIC.glob("*.pcap")) + sorted((ROOT / "captures").glob("*.pcap"))
EXTRA = {
    "oferby_proxy_roce.pcap": ("-d", "udp.port==69,infiniband"),  # RoCEv2 from UDP port 69
    # tshark's RPC-over-RDMA heuristic claims iSER's SCSI READ commands and fails on them (docs/storage.md)
    "iser-rdma.pcap": ("--disable-heuristic", "rpcrdma_infiniband"),
}
CM = PUBLIC / "m3_02-2-write_ibdump_write.pcap"
ERF = PUBLIC / "srinivas_infiniband.pcap"

# Common fields: frame, LRH, GRH, BTH, the extended headers, MAD header, CRCs, encapsulation.
FIELDS = [
    "frame.number",
    "frame.len",
    "frame.cap_len",
    "frame.time_relative",
    "frame.time_delta",
    "eth.src",
    "eth.type",
    "ip.src",
    "ip.dst",
    "ip.len",
    "ipv6.src",
    "udp.srcport",
    "vlan.id",
] + [
    f"infiniband.{f}"
    for f in (
        "lrh.vl",
        "lrh.lver",
        "lrh.sl",
        "lrh.lnh",
        "lrh.dlid",
        "lrh.pktlen",
        "lrh.slid",
        "grh.ipver",
        "grh.tclass",
        "grh.flowlabel",
        "grh.paylen",
        "grh.nxthdr",
        "grh.hoplmt",
        "grh.sgid",
        "grh.dgid",
        "bth.opcode",
        "bth.se",
        "bth.m",
        "bth.padcnt",
        "bth.tver",
        "bth.p_key",
        "bth.destqp",
        "bth.a",
        "bth.psn",
        "reth.va",
        "reth.r_key",
        "reth.dmalen",
        "aeth.syndrome",
        "aeth.msn",
        "deth.q_key",
        "deth.srcqp",
        "immdt",
        "ieth",
        "mad.mgmtclass",
        "mad.method",
        "mad.attributeid",
        "mad.transactionid",
        "invariant.crc",
        "variant.crc",
    )
]
# The same kinds of fields, all held by the compiled records (so printed without a full decode).
RECORD_FIELDS = [
    "frame.number",
    "frame.len",
    "frame.cap_len",
    "frame.time_epoch",
    "frame.time_relative",  # beside the epoch: two time fields on one line
    "eth.src",
    "eth.dst",
    "ip.src",
    "ip.dst",
    "ipv6.dst",
    "udp.srcport",
    "udp.dstport",
    "vlan.id",
    "ip.dsfield.ecn",
] + [
    f"infiniband.{f}"
    for f in (
        "lrh.vl",
        "lrh.sl",
        "lrh.dlid",
        "lrh.slid",
        "grh.sgid",
        "grh.dgid",
        "bth.opcode",
        "bth.se",
        "bth.m",
        "bth.padcnt",
        "bth.tver",
        "bth.p_key",
        "bth.destqp",
        "bth.a",
        "bth.psn",
        "reth.va",
        "reth.r_key",
        "reth.dmalen",
        "aeth.syndrome",
        "aeth.msn",
        "deth.q_key",
        "deth.srcqp",
        "mad.mgmtclass",
        "mad.attributeid",
    )
]

# Opcodes whose headers tshark 4.0 misreads or does not know: from the BTH on, its fields are not the
# packet's (XRC: no XRCETH; DC: RDETH read as AETH; CNP 0x81: "Unknown", padding read as `vendor`).
MISREAD = {code for code, op in OPCODES.items() if op.transport in ("XRC", "DC") or code == 0x81}
CRCS = ("infiniband.invariant.crc", "infiniband.variant.crc")


def run_tshark(path, *args):
    """tshark's output, run once per test run for a capture and arguments (tshark_runs.py)."""
    argv = [TSHARK, "-r", str(path), *EXTRA.get(Path(path).name, ()), *args]
    return tshark_runs.once(
        tshark_runs.version(TSHARK),
        path,
        argv[3:],
        lambda: subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300).stdout,
    )


def _tshark_unsure(theirs: dict) -> tuple:
    """The columns tshark 4.0 gets wrong on this row of its own output (not ours), and why."""
    op = theirs.get("infiniband.bth.opcode", "")
    if op and int(op) in MISREAD:
        first = FIELDS.index("infiniband.bth.opcode") + 1 if "infiniband.bth.opcode" in theirs else 0
        return tuple(k for k in theirs if k.startswith("infiniband.") and list(theirs).index(k) >= first), "misread"
    ip_len = int(theirs.get("ip.len") or 0)
    if theirs.get("frame.cap_len") != theirs.get("frame.len") or ip_len + 14 > int(theirs["frame.cap_len"]):
        return CRCS, "cut short (or IP longer than the frame): tshark shows the last 4 bytes there as the ICRC"
    if theirs.get("infiniband.mad.attributeid") == "0x0038":
        return CRCS, "tshark's MCMemberRecord (SubnAdmSet, SubnAdmGetResp) stops before the CRCs"
    return (), ""


def _rows(out: str, fields):
    return [dict(zip(fields, line.split("\t"))) for line in out.splitlines()]


@pytest.mark.parametrize("fields", [FIELDS, RECORD_FIELDS], ids=["full-decode", "records"])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_field_rows_are_tsharks(path, fields, tshark):
    """Every -T fields row is byte for byte tshark's (hex where tshark shows hex, IPv4-mapped GIDs as
    ::ffff:a.b.c.d, booleans 0/1, ERF frames without the ERF header), apart from the columns tshark 4.0
    gets wrong on a packet, which are compared on the others."""
    args = [a for f in fields for a in ("-e", f)]
    theirs = run_tshark(path, "-T", "fields", *args)
    r = run_ibwire("decode", path, "-T", "fields", *args)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(theirs.splitlines())
    for t, o in zip(_rows(theirs, fields), _rows(r.stdout, fields)):
        unsure, _ = _tshark_unsure(t)
        assert {k: v for k, v in o.items() if k not in unsure} == {k: v for k, v in t.items() if k not in unsure}, {
            k: (t[k], o.get(k)) for k in fields if t[k] != o.get(k)
        }


def test_the_reported_values(tshark):
    """The cases of issue 27: a RoCEv1 GID with an IPv4-mapped tail, a CRC in hex, an ERF frame's length,
    and a filter copied from Wireshark on that length."""
    v1 = PUBLIC / "m3_mlx_rocev1_test.pcap"
    out = run_ibwire(
        "decode", v1, "-c", "1", "-T", "fields", "-e", "infiniband.grh.sgid", "-e", "infiniband.invariant.crc"
    ).stdout
    assert (
        out
        == "::ffff:172.17.242.47\t0xe23d9903\n"
        == run_tshark(v1, "-c", "1", "-T", "fields", "-e", "infiniband.grh.sgid", "-e", "infiniband.invariant.crc")
    )
    sel = ["-Y", "frame.len == 290", "-T", "fields", "-e", "frame.number"]
    assert run_ibwire("decode", ERF, *sel).stdout == run_tshark(ERF, *sel) != ""


def _pairs(text: str):
    return json.loads(text, object_pairs_hook=lambda p: p) if text.strip() else []


ANALYSIS = "infiniband.bth.analysis"  # ibwire's own RC analysis subtree (docs/rc-analysis.md): tshark 4.0 has none


def _no_analysis(items) -> list:
    return [(k, v) for k, v in items if k != ANALYSIS]


def _no_analysis_text(text: str) -> str:
    """-T json text without the RC analysis subtrees (each is followed by the CRCs, so no comma moves)."""
    out, skip = [], None
    for line in text.splitlines(keepends=True):
        if skip is None and line.strip().startswith(f'"{ANALYSIS}": {{'):
            skip = line[: len(line) - len(line.lstrip())] + "}"
        elif skip is not None:
            skip = None if line.rstrip().rstrip(",") == skip else skip
        else:
            out.append(line)
    return "".join(out)


def _skeleton(items, path="") -> list:
    out = []
    for k, v in items:
        if isinstance(v, list) and v and isinstance(v[0], tuple):
            out.append((path, k))
            out += _skeleton(v, f"{path}/{k}")
        elif not k.endswith(".oui_resolved"):  # vendor names from Wireshark's manuf file
            out.append((path, k))
    return out


def _leaves(items, out) -> dict:
    for k, v in items:
        if isinstance(v, list) and v and isinstance(v[0], tuple):
            _leaves(v, out)
        else:
            out.setdefault(k, []).append(v)
    return out


ENCAP = ("frame", "erf", "eth", "vlan", "ip", "ipv6", "udp")
DCB = ("lldp", "macc")  # whole, item for item: tshark's keys, subtrees and values
IB_EXCEPTIONS = {f"infiniband.{k}" for k in TSHARK_EXCEPTIONS}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_json_is_tsharks(path, tshark):
    """-T json: tshark's document per packet (_index, _type, _score, _source.layers); the frame, ERF,
    Ethernet, VLAN, IP, IPv6 and UDP layers with tshark's keys in tshark's order and nesting (name
    resolution as `tshark -n`) and its values; the infiniband layer's transport headers (bytes, *_tree,
    reserved bytes, CRCs) the same in structure, and every InfiniBand value both show equal; the lldp and
    macc layers equal to tshark's."""
    theirs = _pairs(run_tshark(path, "-n", "-T", "json"))
    r = run_ibwire("decode", path, "-T", "json")
    assert r.returncode == 0, r.stderr
    ours = _pairs(r.stdout)
    assert len(ours) == len(theirs)
    eligible = values = 0
    for t, o in zip(theirs, ours):
        assert [k for k, _ in o] == ["_index", "_type", "_score", "_source"] == [k for k, _ in t]
        assert dict(o)["_index"] == dict(t)["_index"]
        tl, ol = dict(dict(dict(t)["_source"])["layers"]), dict(dict(dict(o)["_source"])["layers"])
        # tshark's expert items (a length beyond the captured bytes …) and the protocols ibwire shows as
        # its own layers only (TCP, ICMP, ARP) leave the structure to the values.
        whole = "_ws.expert" not in json.dumps(tl) and not (
            {"tcp", "icmp", "icmpv6", "arp"} & set(dict(tl["frame"])["frame.protocols"].split(":"))
        )
        if "lldp" in dict(tl["frame"])["frame.protocols"].split(":"):
            # tshark 4.0 shows the last 3 bytes of an LLDP frame (the last TLV's last byte and End of LLDPDU),
            # which its LLDP tree decodes, once more as an Ethernet trailer
            tl["eth"] = [(k, v) for k, v in tl["eth"] if k != "eth.trailer"]
        for name in ENCAP:
            if name in tl and whole:
                assert _skeleton(ol[name]) == _skeleton(tl[name]), (dict(tl["frame"])["frame.number"], name)
                leaves = _leaves(tl[name], {})
                for k, v in _leaves(ol[name], {}).items():
                    if k not in ("frame.protocols", "udp.stream") and not k.startswith("udp.time"):
                        assert v == leaves[k], (dict(tl["frame"])["frame.number"], k)
        for name in DCB:
            if name in tl:
                assert ol.get(name) == tl[name], (dict(tl["frame"])["frame.number"], name)
        if "infiniband" not in tl:
            continue
        ol["infiniband"] = _no_analysis(ol["infiniband"])
        theirs_ib, ours_ib = _leaves(tl["infiniband"], {}), _leaves(ol["infiniband"], {})
        op = theirs_ib.get("infiniband.bth.opcode", ["0"])[0]
        if int(op) in MISREAD:
            continue
        eligible += 1
        no_mad = not any(k.startswith("infiniband.mad") for k in theirs_ib)
        if whole and no_mad:
            assert _skeleton(ol["infiniband"]) == _skeleton(tl["infiniband"]), dict(tl["frame"])["frame.number"]
        elif whole:  # a MAD: its class's containers; inside an attribute, values only
            crcs = () if "infiniband.invariant.crc" in theirs_ib else CRCS  # tshark's MCMemberRecord has none
            assert [k for p, k in _skeleton(ol["infiniband"]) if not p and k not in crcs] == [
                k for p, k in _skeleton(tl["infiniband"]) if not p
            ], dict(tl["frame"])["frame.number"]
        for k, v in ours_ib.items():
            if k in theirs_ib and k not in IB_EXCEPTIONS and k != "infiniband.reserved":
                assert v == theirs_ib[k][: len(v)] or set(v) <= set(theirs_ib[k]), (
                    dict(tl["frame"])["frame.number"],
                    k,
                    theirs_ib[k],
                    v,
                )
                values += 1
    assert values or not eligible


@pytest.mark.parametrize(
    "path",
    [CM, ERF, ROOT / "captures" / "roce-v6-vlan.pcap", ROOT / "captures" / "pfc-storm.pcap"],
    ids=lambda p: p.name,
)
def test_ek_is_tsharks(path, tshark):
    """-T ek: tshark's bulk lines (index line, then `timestamp` in ms and `layers` keyed `<layer>_<field>`
    with dots as underscores, booleans true/false), equal to tshark's for the same layers; a field under
    several subtrees of one parent kind (LLDP's TLVs) is one key holding all its values, as print.c groups
    them."""
    theirs = run_tshark(path, "-n", "-T", "ek").splitlines()
    ours = run_ibwire("decode", path, "-T", "ek", check=True).stdout.splitlines()
    assert len(ours) == len(theirs)
    assert ours[::2] == theirs[::2]
    for t, o in zip(theirs[1::2], ours[1::2]):
        t, o = json.loads(t), json.loads(o)
        assert o["timestamp"] == t["timestamp"]
        for name in ("frame", "eth", "ip", "ipv6", "udp", "vlan", "erf", "lldp", "macc"):
            if name in t["layers"]:
                # eth_trailer: tshark 4.0 ends an LLDPDU with an IEEE Application Priority TLV three bytes
                # early and shows them again as an Ethernet trailer
                drop = ("_oui_resolved", "_udp_stream", "udp_time", "eth_eth_trailer")
                assert {k: v for k, v in o["layers"][name].items() if not any(d in k for d in drop)} == {
                    k: v for k, v in t["layers"][name].items() if not any(d in k for d in drop)
                }
        ib_t, ib_o = t["layers"].get("infiniband", {}), o["layers"].get("infiniband", {})
        if ib_t.get("infiniband_infiniband_bth_opcode") == "129":
            continue  # tshark 4.0 knows no CNP (opcode 0x81): no ICRC after it (test_dissect_tshark)
        for k in (
            "infiniband_infiniband_bth_psn",
            "infiniband_infiniband_bth_se",
            "infiniband_infiniband_lrh_dlid",
            "infiniband_infiniband_deth_q_key",
            "infiniband_infiniband_invariant_crc",
        ):
            assert ib_o.get(k) == ib_t.get(k), k


@pytest.mark.parametrize("fmt", ["json", "ek"])
@pytest.mark.parametrize(
    "select",
    [
        ("-e", "frame.number", "-e", "infiniband.bth.psn", "-e", "ip.addr", "-e", "infiniband.grh.sgid"),
        ("-j", "udp"),
        ("-J", "udp"),
        ("-j", "infiniband"),
    ],
    ids=["e", "j", "J", "j-infiniband"],
)
def test_field_and_protocol_selection_is_tsharks(fmt, select, tshark):
    """-e keeps the named fields (lists of values; absent ones left out), -j a protocol's own items (the
    MADs' containers included), -J a protocol whole; every other protocol is {"filtered": name}: byte for
    byte tshark's."""
    assert run_ibwire("decode", CM, "-T", fmt, "-c", "4", *select, check=True).stdout == run_tshark(
        CM, "-n", "-T", fmt, "-c", "4", *select
    )


def test_transport_only_json_is_tsharks_byte_for_byte(tshark):
    """The whole text of -T json for RoCEv2 data packets, as `tshark -n` writes it (ibwire's own RC analysis
    subtrees, which tshark 4.0 lacks, aside)."""
    path = ROOT / "captures" / "loss-retransmit.pcap"
    flt = ["-Y", "infiniband.bth.opcode != 100"]
    ours = run_ibwire("decode", path, "-T", "json", *flt, check=True).stdout
    assert ANALYSIS in ours
    assert _no_analysis_text(ours) == run_tshark(path, "-n", "-T", "json", *flt)


def test_jsonl_keeps_ibwires_own_shape_with_ipv6_gids():
    """--format jsonl stays ibwire's compact record (docs/jsonl.md), its GIDs IPv6 text."""
    obj = json.loads(
        run_ibwire("decode", PUBLIC / "m3_mlx_rocev1_test.pcap", "-c", "1", "--format", "jsonl", check=True).stdout
    )
    assert set(obj) == {"frame", "time", "caplen", "len", "linktype", "layers", "errors"}
    assert obj["layers"]["grh"]["sgid"] == "::ffff:172.17.242.47"


def test_jsonl_doc_lists_every_record_field():
    """docs/jsonl.md's table names every header key the compiled records hold (jsonl, the full decode, holds
    them and more)."""
    from ibwire.decode.records import FIELD_KEYS

    doc = (ROOT / "docs" / "jsonl.md").read_text()
    rows = {
        tuple(cell.strip(" `") for cell in line.split("|")[1:3]) for line in doc.splitlines() if line.startswith("| `")
    }
    headers = (
        "lrh",
        "bth",
        "rdeth",
        "deth",
        "xrceth",
        "reth",
        "atomiceth",
        "aeth",
        "atomicacketh",
        "immdt",
        "ieth",
        "mad",
    )
    want = {tuple(key.split(".", 1)) for key in FIELD_KEYS.values() if key.split(".", 1)[0] in headers}
    assert want <= rows, want - rows


COUNT_FULL_DECODES = r"""
import atexit, sys
import ibwire.decode as D
calls, real = [0], D.decode_frame
D.decode_frame = lambda f: (calls.__setitem__(0, calls[0] + 1), real(f))[1]
atexit.register(lambda: sys.stderr.write(f"full decodes: {calls[0]}\n"))
from ibwire.cli import main
sys.argv = ["ibwire", "decode", *sys.argv[1:]]
main()
"""


def _full_decodes(path, fields) -> int:
    args = [a for f in fields for a in ("-e", f)]
    r = subprocess.run(
        [sys.executable, "-c", COUNT_FULL_DECODES, str(path), "-T", "fields", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return int(r.stderr.splitlines()[-1].rsplit(" ", 1)[1])


@pytest.mark.parametrize("name", ["congestion.pcap", "roce-v6-vlan.pcap", "loss-retransmit.pcap"])
def test_record_fields_decode_nothing_in_full(name):
    """The common fields, two time fields on one line among them, print from the records: they decode no
    frame in full beyond those every output decodes (CM MADs, SENDs a storage heuristic reads); on a capture
    of RDMA WRITEs, none (1,000,000 frames decoded in full would take minutes)."""
    path = ROOT / "captures" / name
    assert _full_decodes(path, RECORD_FIELDS) == _full_decodes(path, ["frame.number"])
    if name == "congestion.pcap":
        assert _full_decodes(path, RECORD_FIELDS) == 0
