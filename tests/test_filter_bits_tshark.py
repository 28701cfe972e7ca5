"""Display filters and `-e` on single bits of flag words select and print what tshark 4.0 does: PortInfo's
CapabilityMask bits (`portinfo.capabilitymask.issm == 1`, bare, negated, combined with `&&`, with or without
the `infiniband.` prefix) on the ibsim/opensm sweep (where a tool sets IsSM), the shipped SM sweep and the
multi-tenant samples; the Ethernet address bits, IPv4's flags and fragment offset, IPv6's version and ERF's
flags and type on the public captures, the samples with multicast, IPoIB, IPv6 and ERF frames and crafted
IPv4 fragments.  Each set is gathered into one pcapng, so tshark starts once per filter.  The CapabilityMask
bits tshark 4.0 does not name (IBA's bits 13-15 and 28-31) are ibwire's own and select what tshark's `&` on
the word selects; a bit that does not exist stays an error, as in tshark.
"""

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import run_ibwire
from fabric import scenario
from merged_pcapng import merge
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap
from tshark_oracle import PUBLIC, TSHARK

from dissectors.madnames import CAPABILITY_MASK
from ibwire.decode import decode_frame
from ibwire.decode.filter import compile_filter
from ibwire.decode.stream import Stream, select
from ibwire.files import iter_frames

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [ROOT / "captures" / n for n in ("sm-sweep.pcap", "multitenant-breach.pcap", "multitenant-clean.pcap")]
CM = "infiniband.portinfo.capabilitymask"
# ibwire's filter -> tshark's (the same, or for the bits tshark 4.0 does not name, `&` on the word)
FILTERS = {
    f"{CM}.issm": None,
    f"{CM}.issm == 1": None,
    f"{CM}.issm == 0": None,
    f"!{CM}.issm": None,
    f"!{CM}.issm == 1": None,
    f"{CM}.issm == 1 && infiniband.portinfo.lid == 3": None,
    f"{CM}.trapsupported == 1 && {CM}.issm == 0": None,
    f"{CM}.smdisabled == 1 || {CM}.linkroundtriplatencysupported != 0": None,
    f"{CM}.vendorclasssupported in {{1}} && !({CM}.issm == 1)": None,
    f"{CM}.issm & 1": None,
    f"{CM}.extendedspeedssupported == 1": f"{CM} & 0x4000",
    f"{CM}.capabilitymask2supported == 0": f"{CM} && !({CM} & 0x8000)",
}
ENCAP_SAMPLES = [
    ROOT / "captures" / n for n in ("pfc-storm.pcap", "congestion-ib.pcap", "roce-v6-vlan.pcap", "ud-ipoib.pcap")
]
ENCAP_FILTERS = [
    "eth.dst.ig == 1",
    "eth.ig == 0 && eth.dst.ig == 1",
    "eth.lg",
    "!eth.src.lg == 0",
    "ip.flags.df == 1 && eth.dst.lg == 0",
    "ip.flags == 0",
    "!ip.flags.df",
    "ip.flags.mf == 1 || ip.flags.rb == 1",
    "ip.frag_offset == 185",
    "ip.frag_offset == 8191 && ip.flags.mf == 1",
    "ipv6.version == 6",
    "ip.flags & 2",
    "erf.flags.vlen == 1 && erf.types.type == 21",
    "erf.flags.cap != 0",
    "erf.types == 0x15 && !erf.flags.rxe == 1 && erf.flags.trunc == 0",
]
ENCAP_BITS = ["eth.dst.ig", "eth.src.lg", "eth.ig", "eth.lg", "ip.flags", "ip.flags.rb", "ip.flags.df", "ip.flags.mf"]
ENCAP_BITS += ["ipv6.version", "ip.frag_offset"]
ENCAP_BITS += ["erf.flags.cap", "erf.flags.vlen", "erf.flags.res", "erf.types", "erf.types.ext_header"]
# the bits tshark 4.0 names (IBA bits 1-12 and 16-27)
NAMED = [n for n, m in CAPABILITY_MASK if not 0x2000 <= m <= 0x8000 and m < 1 << 28]


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    work = tmp_path_factory.mktemp("bits")
    return merge(work / "all.pcapng", [Path(scenario.run(str(work))["path"]), *SAMPLES])


@pytest.fixture(scope="module")
def encap(tmp_path_factory):
    """The public captures, the samples and IPv4 fragments with each flag (the captures hold none)."""
    work = tmp_path_factory.mktemp("encap")
    frags = [
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2", flags=flags, frag=offset)
        / UDP(sport=1, dport=9)
        / Raw(b"x" * 40)
        for flags, offset in (("MF", 0), (0, 185), ("evil", 0), ("MF", 8191))
    ]
    wrpcap(str(work / "fragments.pcap"), frags)
    return merge(work / "all.pcapng", sorted(PUBLIC.glob("*.pcap")) + ENCAP_SAMPLES + [work / "fragments.pcap"])


def tshark(path, *args):
    r = subprocess.run([TSHARK, "-r", str(path), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (args, r.stderr[-300:])
    return r.stdout


def numbers(out: str) -> list:
    return [int(x) for x in out.split()]


def ibwire(*args):
    r = run_ibwire("decode", *args)
    assert r.returncode == 0, (args, r.stderr[-300:])
    return r.stdout


def selections(path, filters: dict) -> list:
    """(ibwire's filter, tshark's frames, ibwire's frames) for each filter, ibwire's from the selection `decode -Y`
    runs (records first, the full decode for the frames they cannot answer for), each frame decoded once."""
    with ThreadPoolExecutor(2) as pool:
        theirs = list(
            pool.map(
                lambda t: numbers(tshark(path, "-Y", filters[t] or t, "-T", "fields", "-e", "frame.number")), filters
            )
        )
    frames = list(iter_frames(str(path)))
    flats = {}

    def flat_of(batch, i, t0, prev):
        k = int(batch.rec["frame"][i])
        if k not in flats:
            flats[k] = decode_frame(frames[k - 1]).flat
        return flats[k]

    out = []
    for n, (text, want) in enumerate(zip(filters, theirs)):
        ours = text if n % 2 else text.replace("infiniband.", "")  # the prefix is optional
        got = [
            int(k)
            for batch, mask in select(Stream(str(path)), compile_filter(ours), flat_of)
            for k in batch.rec["frame"][mask].tolist()
        ]
        out.append((ours, want, got))
    return out


def test_bit_filters_select_tsharks_frames(merged):
    found = selections(merged, FILTERS)
    assert [(t, len(want), len(got)) for t, want, got in found if got != want] == []
    counts = {t: len(want) for t, (_, want, _) in zip(FILTERS, found)}
    assert counts[f"{CM}.issm == 1"] > 0 and counts[f"{CM}.issm == 0"] > 0  # the captures hold both values
    text = f"{CM}.issm == 1 && infiniband.portinfo.lid == 3 || {CM}.trapsupported == 0 && infiniband.portinfo.lid"
    assert numbers(ibwire(merged, "-Y", text, "-T", "fields", "-e", "frame.number")) == numbers(
        tshark(merged, "-Y", text, "-T", "fields", "-e", "frame.number")
    )


def test_ethernet_ipv4_and_erf_flag_bits_select_and_print_as_tshark(encap):
    found = selections(encap, dict.fromkeys(ENCAP_FILTERS))
    assert [(t, len(want), len(got)) for t, want, got in found if got != want] == []
    assert all(want for _, want, _ in found)  # the captures hold each case
    args = [a for f in ["frame.number", *ENCAP_BITS] for a in ("-e", f)]
    text = "eth || erf"
    assert ibwire(encap, "-Y", text, "-T", "fields", *args) == tshark(encap, "-Y", text, "-T", "fields", *args)


def test_bits_print_as_tshark_prints_them(merged):
    fields = ["frame.number", CM, *(f"{CM}.{n}" for n in NAMED)]
    args = [a for f in fields for a in ("-e", f)]
    want = tshark(merged, "-Y", CM, "-T", "fields", *args)
    assert want.count("\n") > 100 and "0x00000001" in want
    assert ibwire(merged, "-Y", CM.replace("infiniband.", ""), "-T", "fields", *args) == want


@pytest.mark.parametrize(
    "text,message", [(f"{CM}.nosuchbit == 1", "is not a field"), (f"{CM}.issm == 0x100000000", "too big")]
)
def test_a_bit_that_does_not_exist_or_a_number_too_big_is_refused_like_tshark(merged, text, message):
    r = run_ibwire("decode", merged, "-Y", text)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    t = subprocess.run([TSHARK, "-r", str(merged), "-Y", text], capture_output=True, text=True)
    assert t.returncode != 0 and not t.stdout
