"""Notices (SubnTrap, SA Report) in `-V` and `-T json` as tshark shows them: under `Attribute (Notice)` the
trap's description (tshark's wording, leading space and all), the Notice's fields, then its trap's fields under
`Trap N DataDetails` before the `DataDetails` bytes; a number tshark does not know titled `Unknown or Vendor
Specific Trap Number! (0x…)` over a bare `Vendor Specific Subnet Management Trap`.  Frames are crafted for every
trap packet-infiniband.c decodes (64-69, 128-131, 144, 145, 256-259), numbers it does not, a vendor's notice
numbered as a generic trap (tshark decodes it by the number alone), a directed-route SMP and SA Notices.
tshark 4.0 (the host's) is the oracle of -V; -T json is compared with tshark 4.0 and 4.4, which agree there.
"""

import json
import re
import subprocess

import pytest
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point
from test_mad_crafted import GID1, GID2, smp
from test_mad_oracle import write_erf_pcap

from dissectors.mad import MAD
from dissectors.mad.notice import (
    Notice,
    TrapBadKey,
    TrapBadMKey,
    TrapBadPKeySwitch,
    TrapGID,
    TrapLinkState,
    TrapLocalChanges,
    TrapPaths,
    TrapPort,
    TrapSysImageGUID,
)
from dissectors.mad.sa import RMPP, SA
from dissectors.madnames import TRAP_TITLES

TRAPS = {
    64: TrapGID(gidaddr=GID1),
    65: TrapGID(gidaddr=GID2),
    66: TrapGID(gidaddr="ff12:401b:ffff::1"),
    67: TrapGID(gidaddr="ff12:401b:ffff::2"),
    68: TrapPaths(comp_mask=0x1234, wait_for_repath=1),
    69: TrapPaths(comp_mask=0xFFFF00),
    128: TrapLinkState(lidaddr=0x22),
    129: TrapPort(lidaddr=5, portno=3),
    130: TrapPort(lidaddr=6, portno=4),
    131: TrapPort(lidaddr=7, portno=9),
    144: TrapLocalChanges(
        lidaddr=4,
        otherlocalchanges=1,
        capabilitymask=0x02510868,
        linkspeedenabledchange=1,
        linkwidthenabledchange=1,
        nodedescriptionchange=1,
    ),
    145: TrapSysImageGUID(lidaddr=8, systemimageguid=0x0002C90300A1F002),
    256: TrapBadMKey(
        lidaddr=3,
        drslid=0xFFFF,
        method=1,
        attributeid=0x15,
        attributemodifier=1,
        mkey=0x1122334455667788,
        drnotice=1,
        drpathtruncated=1,
        drhopcount=2,
        drnoticereturnpath=b"\0\x02\x05" + b"\0" * 27,
    ),
    257: TrapBadKey(lidaddr1=4, lidaddr2=7, key=0x8001, sl=3, qp1=0x48, qp2=0x49, gidaddr1=GID1, gidaddr2=GID2),
    258: TrapBadKey(lidaddr1=4, lidaddr2=7, key=0x80010000, sl=15, qp1=0x48, qp2=0x49, gidaddr1=GID1, gidaddr2=GID2),
    259: TrapBadPKeySwitch(
        datavalid=0x8000,
        lidaddr1=4,
        lidaddr2=7,
        pkey=0x8001,
        sl=3,
        qp1=0x48,
        qp2=0x49,
        gidaddr1=GID1,
        gidaddr2=GID2,
        swlidaddr=0x30,
        portno=12,
    ),
}
UNKNOWN = (0, 1, 70, 0x800, 0x1234, 0xFFFF)  # numbers packet-infiniband.c neither describes nor decodes
VENDOR_DATA = bytes(range(1, 55))
# Trap 259: tshark 4.0 and 4.4 register its DataValid (and SWLIDADDR) as an IPv6 address, so the trap's first
# field throws (`Trying to fetch an IPv6 address with length 2`, Malformed Packet) and tshark shows none of
# them; ibwire shows them (IBA §14.2.5.1), in packet-infiniband.c's order, which is this.
TRAP_259 = "DataValid LIDADDR1 LIDADDR2 PKEY SL QP1 QP2 GIDADDR1 GIDADDR2 SWLIDADDR PORTNO".split()


def notice(number, trap=None, generic=1):
    fields = dict(isgeneric=generic, type=1, producertypevendorid=2, trapnumberdeviceid=number, issuerlid=9)
    fields.update(noticetoggle=1, noticecount=3)
    return Notice(**fields, **({"trap": trap} if trap is not None else {"datadetails": VENDOR_DATA}))


def sa_notice(method, note):
    head = MAD(mgmtclass=0x03, classversion=2, method=method, attributeid=0x0002, transactionid=0x99)
    return bytes(head / RMPP(rmpptype=0) / SA(attributeoffset=10) / note).ljust(256, b"\0")


# (what the frame is, its MAD)
FRAMES = (
    [(f"trap {n}", smp(0x0002, notice(n, trap), method=0x05)) for n, trap in TRAPS.items()]
    + [(f"unknown trap {n:#x}", smp(0x0002, notice(n), method=0x05)) for n in UNKNOWN]
    + [
        ("vendor notice numbered 257", smp(0x0002, notice(257, TRAPS[257], generic=0), method=0x05)),
        ("directed-route TrapRepress", smp(0x0002, notice(128, TRAPS[128]), method=0x07, directed=True)),
        ("SA Report", sa_notice(0x06, notice(64, TRAPS[64]))),
        ("SA ReportResp", sa_notice(0x86, notice(129, TRAPS[129]))),
        ("SA GetResp", sa_notice(0x81, notice(257, TRAPS[257]))),
        ("SA Report of an unknown trap", sa_notice(0x06, notice(0x800))),
    ]
)


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    path = tmp_path_factory.mktemp("notices") / "notices.pcap"
    write_erf_pcap(path, [mad for _, mad in FRAMES])
    return path


def notice_sections(text: str) -> list:
    """Each frame's `Attribute (Notice)` line and the lines below it, one list per frame."""
    out, depth = [], None
    for line in text.splitlines():
        if line.startswith("Frame "):
            out.append([])
            depth = None
        indent = len(line) - len(line.lstrip())
        if depth is not None and indent <= depth:
            depth = None
        if line.strip() == "Attribute (Notice)":
            depth = indent
        if depth is not None:
            out[-1].append(line)
    return out


def test_every_trap_is_crafted():
    """The frames hold every trap number tshark describes."""
    assert set(TRAP_TITLES) == set(TRAPS)


def as_40(line: str) -> str:
    """A -V line of tshark 4.4 as tshark 4.0 prints it: 4.4 shows all 54 DataDetails bytes, 4.0 (and ibwire)
    the first 36 and `…`; nothing else of a Notice differs between them."""
    label, _, shown = line.partition("DataDetails: ")
    return f"{label}DataDetails: {shown[:72]}…" if len(shown) > 72 else line


def tshark_run(request, version, path, *args) -> str:
    if version == "4.0":
        tshark = request.getfixturevalue("tshark")
        return subprocess.run([tshark, "-n", "-r", str(path), *args], capture_output=True, text=True).stdout
    return request.getfixturevalue("tshark44")(path, "-n", *args)


@pytest.mark.parametrize("version", ["4.0", "4.4"])
def test_notice_trees_are_tsharks(crafted, request, version):
    """Each Notice's -V lines are tshark's: title, fields, `Trap N DataDetails` and its fields, the DataDetails
    bytes (cut as tshark 4.0 cuts them); for trap 259 (which tshark cannot show) its title lines and its fields
    in packet-infiniband.c's order."""
    theirs = notice_sections(tshark_run(request, version, crafted, "-V"))
    ours = notice_sections(run_ibwire("decode", crafted, "-V", check=True).stdout)
    assert len(ours) == len(theirs) == len(FRAMES)
    for (what, _), t, o in zip(FRAMES, theirs, ours):
        t = [as_40(x) for x in t]
        if what == "trap 259":
            assert o[: len(t) - 4] == t[:-4], what  # up to tshark's expert info in `Trap 259 DataDetails`
            labels = [re.sub(r"^[01. ]+ = ", "", x.strip()).split(":")[0] for x in o[len(t) - 4 : -1]]
            assert labels == TRAP_259
            continue
        assert o == t, what
    titles = [t[1] for t in theirs]
    assert titles[: len(TRAPS)] == [" " * 12 + TRAP_TITLES[n] for n in TRAPS]
    assert titles[len(TRAPS)] == " " * 12 + "Unknown or Vendor Specific Trap Number! (0x00)"


def attribute_trees(text: str) -> list:
    """Each frame's attribute container in a -T json, the SMP's or the SA's, as (key, value) pairs in their
    order (repeated keys kept)."""
    out = []
    for packet in json.loads(text, object_pairs_hook=list):
        ib = dict(dict(dict(packet)["_source"])["layers"])["infiniband"]
        head = next(
            v
            for k, v in ib
            if k in ("infiniband.smplid_tree", "infiniband.smpdirected_tree", "infiniband.sa.drdlid_tree")
        )
        out.append([(k, v) for k, v in head if k.endswith(("smpdata_tree", "drdlid_tree"))])
    return out


@pytest.mark.parametrize("version", ["4.0", "4.4"])
def test_notice_json_is_tsharks(crafted, request, version):
    """-T json nests each Notice as tshark 4.0 and 4.4 do (the trap's fields in an `infiniband.smplid.smpdata`
    item before `infiniband.notice.datadetails`, in SA too), trap 259 aside (see TRAP_259)."""
    text = tshark_run(request, version, crafted, "-T", "json")
    ours = attribute_trees(run_ibwire("decode", crafted, "-T", "json", check=True).stdout)
    for (what, _), t, o in zip(FRAMES, attribute_trees(text), ours, strict=True):
        if what != "trap 259":
            assert o == t, what
