"""Differential: PAUSE, PFC and LLDP DCBX (IEEE and CEE) frames crafted here decode to the values tshark 4.0 shows, field by
field (every `macc.*` and `lldp.*` field tshark names, in frame order), in `-T json` and in `-T fields`."""

import json
import random
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import run_ibwire
from scapy.contrib.lldp import (
    LLDPDUChassisID,
    LLDPDUEndOfLLDPDU,
    LLDPDUGenericOrganisationSpecific,
    LLDPDUManagementAddress,
    LLDPDUPortDescription,
    LLDPDUPortID,
    LLDPDUSystemCapabilities,
    LLDPDUSystemDescription,
    LLDPDUSystemName,
    LLDPDUTimeToLive,
)
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import wrpcap
from tshark_oracle import _flatten, normalise, tshark_json

from dissectors.dcb import (
    LLDPDUCEEDCBX,
    DCBXApp,
    LLDPDUAppPriority,
    LLDPDUETSConfiguration,
    LLDPDUETSRecommendation,
    LLDPDUPFCConfiguration,
    MACControl,
    MACControlPause,
    MACControlPFC,
    pause_seconds,
)
from ibwire.decode import decode_frame
from ibwire.files import iter_frames

ROOT = Path(__file__).resolve().parents[1]
PAUSE_DST, LLDP_DST = "01:80:c2:00:00:01", "01:80:c2:00:00:0e"


def _frames(seed=7):
    rnd = random.Random(seed)
    out = []
    for i in range(24):
        src = f"02:00:00:00:{i >> 8:02x}:{i & 255:02x}"
        quanta = [rnd.choice((0, 0xFFFF, rnd.randrange(1, 0xFFFF))) for _ in range(8)]
        pfc = MACControl() / MACControlPFC(enbv=rnd.randrange(256), pause_time=quanta)
        eth = Ether(src=src, dst=PAUSE_DST)
        out.append(eth / pfc if i % 3 else eth / Dot1Q(vlan=i, prio=i % 8) / pfc)
        out.append(
            Ether(src=src, dst=PAUSE_DST) / MACControl(opcode=1) / MACControlPause(pause_time=rnd.randrange(65536))
        )
        tables = {
            **{f"prio{p}": rnd.randrange(8) for p in range(8)},
            **{f"bw{t}": rnd.randrange(101) for t in range(8)},
            **{f"tsa{t}": rnd.choice((0, 1, 2, 255)) for t in range(8)},
        }
        apps = [
            DCBXApp(prio=rnd.randrange(8), sel=rnd.randrange(1, 6), proto=rnd.choice((4791, 0x8915, 26, 860)))
            for _ in range(rnd.randrange(1, 5))
        ]
        out.append(
            Ether(src=src, dst=LLDP_DST)
            / LLDPDUChassisID(subtype=4, id=src)
            / LLDPDUPortID(subtype=5, id=f"swp{i}")
            / LLDPDUTimeToLive(ttl=rnd.randrange(1, 65536))
            / LLDPDUPortDescription(description=f"to spine{i % 4}".encode())
            / LLDPDUSystemName(system_name=b"leaf1")
            / LLDPDUSystemDescription(description=b"Cumulus Linux 5.9")
            / _capabilities(rnd)
            / _management_address(rnd, i)
            / LLDPDUGenericOrganisationSpecific(
                org_code=0x0080C2, subtype=1, data=struct.pack(">H", rnd.randrange(4095))
            )
            / LLDPDUGenericOrganisationSpecific(
                org_code=0x00120F, subtype=4, data=struct.pack(">H", rnd.choice((1518, 9216)))
            )
            / _switch_tlvs(rnd, i)
            / LLDPDUETSConfiguration(willing=rnd.randrange(2), cbs=rnd.randrange(2), maxtcs=rnd.randrange(8), **tables)
            / LLDPDUETSRecommendation(**tables)
            / LLDPDUPFCConfiguration(
                willing=rnd.randrange(2), mbc=rnd.randrange(2), numtcs=rnd.randrange(9), enable=rnd.randrange(256)
            )
            / LLDPDUAppPriority(apps=apps)
            / LLDPDUGenericOrganisationSpecific(org_code=0x00AABB, subtype=1, data=b"\x03\x6c")
            / LLDPDUEndOfLLDPDU()
        )
        out.append(
            Ether(src=src, dst=LLDP_DST)
            / LLDPDUChassisID(subtype=4, id=src)
            / LLDPDUPortID(subtype=5, id=f"p{i}")
            / LLDPDUTimeToLive(ttl=120)
            / LLDPDUCEEDCBX(subtlvs=_cee(rnd))
            / LLDPDUEndOfLLDPDU()
        )
    return out


def _switch_tlvs(rnd, i):
    """The IEEE 802.3 and 802.1 TLVs switches send besides DCBX: MAC/PHY configuration (auto-negotiation bits,
    advertised PMD capabilities, MAU type), port and protocol VLAN, VLAN name, link aggregation."""

    def org(oui, sub, data):
        return LLDPDUGenericOrganisationSpecific(org_code=oui, subtype=sub, data=data)

    mau = rnd.choice((0x10, 0x1E, 0x1F))
    return (
        org(0x00120F, 1, bytes([rnd.randrange(4)]) + struct.pack(">HH", rnd.getrandbits(16), mau))
        / org(0x0080C2, 2, bytes([rnd.choice((0, 2, 4, 6))]) + struct.pack(">H", rnd.randrange(4095)))
        / org(0x0080C2, 3, struct.pack(">HB", rnd.randrange(4095), 4 + len(str(i))) + f"rdma{i}".encode())
        / org(0x0080C2, 7, bytes([rnd.randrange(16)]) + struct.pack(">I", rnd.getrandbits(32)))
    )


def _capabilities(rnd):
    """System Capabilities with random bits among the eight tshark 4.0 names (IEEE 802.1AB Table 8-4)."""
    names = ("other", "repeater", "mac_bridge", "wlan_access_point", "router", "telephone", "docsis_cable_device")
    names += ("station_only",)
    return LLDPDUSystemCapabilities(
        **{f"{n}_available": rnd.randrange(2) for n in names}, **{f"{n}_enabled": rnd.randrange(2) for n in names}
    )


def _management_address(rnd, i):
    """A management address: IPv4 or IPv6, an ifIndex or system port number, now and then an object identifier."""
    v6 = i % 2
    return LLDPDUManagementAddress(
        management_address_subtype=2 if v6 else 1,
        management_address=bytes(rnd.randrange(256) for _ in range(16 if v6 else 4)),
        interface_numbering_subtype=rnd.choice((1, 2, 3)),
        interface_number=rnd.getrandbits(32),
        object_id=b"\x2b\x06\x01\x04\x01\x82\x37" if i % 3 == 0 else b"",
    )


def _cee(rnd) -> bytes:
    """CEE DCBX sub-TLVs (DCBX 1.01) with random contents: control, priority groups, PFC, applications."""

    def sub(kind, value):
        return struct.pack(">H", kind << 9 | len(value)) + value

    def head():
        return bytes([rnd.randrange(3), rnd.randrange(3), rnd.randrange(8) << 5, rnd.randrange(3)])

    apps = b"".join(
        struct.pack(">H", rnd.choice((0x8906, 4791, 3260)))
        + bytes([rnd.randrange(256)])
        + rnd.randbytes(2)
        + bytes([rnd.choice((0, 8, 12, 128, rnd.randrange(256)))])
        for _ in range(rnd.randrange(1, 4))
    )
    return (
        sub(1, bytes([0, rnd.randrange(3)]) + struct.pack(">II", rnd.getrandbits(32), rnd.getrandbits(32)))
        + sub(2, head() + rnd.randbytes(4) + bytes(rnd.randrange(101) for _ in range(8)) + bytes([rnd.randrange(9)]))
        + sub(3, head() + bytes([rnd.randrange(256), rnd.randrange(9)]))
        + sub(4, head() + apps)
    )


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("dcb") / "dcb.pcap"
    wrpcap(str(path), _frames())
    return path


def _theirs(packet):
    raw = {}
    _flatten(packet["_source"]["layers"], raw)
    return {
        k: [normalise(v) for v in vs]
        for k, vs in raw.items()
        if k.split(".")[0] in ("macc", "lldp") and not k.endswith("_tree")
    }


def _as_list(value):
    return [
        normalise(v) if isinstance(v, str) else int(v) if isinstance(v, bool) else v
        for v in (value if isinstance(value, list) else [value])
    ]


def test_every_field_tshark_shows_agrees(capture, tshark):
    decoded = [decode_frame(f) for f in iter_frames(capture)]
    packets = tshark_json(capture)
    assert len(packets) == len(decoded) == 96
    compared = set()
    for pkt, d in zip(packets, decoded):
        assert not d.errors, d.errors
        for key, values in _theirs(pkt).items():
            assert key in d.flat, f"frame {d.frame.number}: ibwire lacks {key} (tshark: {values})"
            ours = _as_list(d.flat[key])
            # tshark's JSON merges sibling subtrees of one title ("Unknown Application" twice) into one key,
            # moving the later ones up: the values agree as a multiset here, in frame order in -T fields below
            assert sorted(map(str, ours)) == sorted(map(str, values)), (
                f"frame {d.frame.number} {key}: tshark {values}, ibwire {ours}"
            )
            compared.add(key)
    # every DCB field ibwire names is among those compared (nothing of ours goes unchecked but pause_s)
    for d in decoded:
        ours = {k for k in d.flat if k.split(".")[0] in ("macc", "lldp") and "." in k and "pause_s" not in k}
        assert ours <= compared, ours - compared
    assert {
        "macc.cbfc.enbv",
        "macc.cbfc.pause_time.c7",
        "macc.pause_time",
        "lldp.dcbx.ieee.ets.tsa7",
        "lldp.dcbx.feature.pfc.prio3",
        "lldp.dcbx.ieee.app.prio",
        "lldp.dcbx.feature.pg.pgid_prio7",
        "lldp.dcbx.control.seq",
        "lldp.dcbx.feature.app.oui",
        "lldp.dcbx.feature.app.prio",
        "lldp.dcbx.feature.willing",
        "lldp.dcbx.feature.pg.numtcs",
    } <= compared


def test_fields_output_equals_tsharks(capture, tshark):
    keys = [
        "frame.protocols",
        "macc.opcode",
        "macc.pause_time",
        "macc.cbfc.enbv",
        "macc.cbfc.enbv.c5",
        "macc.cbfc.pause_time.c0",
        "macc.cbfc.pause_time.c6",
        "lldp.tlv.type",
        "lldp.tlv.len",
        "lldp.chassis.id.mac",
        "lldp.port.id",
        "lldp.time_to_live",
        "lldp.orgtlv.oui",
        "lldp.ieee.802_1.subtype",
        "lldp.ieee.802_3.pmd_auto_neg_advertised_caps",
        "lldp.ieee.802_3.pmd_auto_neg_advertised_caps_inv.other",
        "lldp.ieee.802_3.pmd_mau_type",
        "lldp.ieee.802_1.vlan.name",
        "lldp.ieee.802_1.aggregation_status.porttype",
        "lldp.ieee.802_1.port_proto_vlan.id",
        "lldp.dcbx.ieee.willing",
        "lldp.dcbx.ieee.ets.maxtcs",
        "lldp.dcbx.feature.pg.per2",
        "lldp.dcbx.ieee.pfc.numtcs",
        "lldp.dcbx.feature.pfc.prio0",
        "lldp.dcbx.ieee.app.prio",
        "lldp.dcbx.iee.app.sf",
        "lldp.dcbx.feature.app.proto",
        "vlan.priority",
        "lldp.dcbx.proto",
        "lldp.dcbx.type",
        "lldp.dcbx.version",
        "lldp.dcbx.control.ack",
        "lldp.dcbx.feature.enabled",
        "lldp.dcbx.feature.subtype",
        "lldp.dcbx.feature.app.oui",
        "lldp.dcbx.feature.app.sf",
        "lldp.dcbx.feature.app.prio",
        "lldp.dcbx.feature.pfc.numtcs",
    ]
    args = [a for k in keys for a in ("-e", k)]
    theirs = subprocess.run(
        [tshark, "-r", str(capture), "-T", "fields", *args], capture_output=True, text=True, check=True
    ).stdout
    ours = run_ibwire("decode", capture, "-T", "fields", *args, check=True, unwrapped=True).stdout
    assert ours.splitlines() == theirs.splitlines()


def test_pause_time_in_seconds_at_the_port_speed(capture):
    """A quantum is 512 bit times: 65535 quanta stop a 100 Gb/s port for 335.5 µs, a 25 Gb/s one 4× longer;
    the summary line says which speed it assumed."""
    assert pause_seconds(0xFFFF) == pytest.approx(335.5392e-6)
    assert pause_seconds(0xFFFF, 25e9) == pytest.approx(4 * 335.5392e-6)
    d = next(d for d in map(decode_frame, iter_frames(capture)) if d.flat.get("macc.pause_time"))
    assert d.flat["macc.pause_s"] == pytest.approx(d.flat["macc.pause_time"] * 512 / 100e9)
    text = run_ibwire("decode", capture, "--port-speed", "25G", "-c", "2", check=True, unwrapped=True).stdout
    assert "at 25 Gb/s" in text and "PFC" in text and "PAUSE" in text


def test_health_reads_the_pfc_priorities_tshark_shows(capture, tshark):
    """`ibwire health` takes each port's PFC-enabled priorities from its last DCBX PFC TLV (here the CEE one,
    sent after the IEEE one): the priorities tshark shows enabled in that frame."""
    keys = [f"lldp.dcbx.feature.pfc.prio{p}" for p in range(8)]
    out = subprocess.run(
        [tshark, "-r", str(capture), "-Y", "lldp.dcbx.proto", "-T", "fields", "-e", "eth.src"]
        + [a for k in keys for a in ("-e", k)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    want = {}
    for line in out.splitlines():
        src, *bits = line.split("\t")
        want[src] = [p for p, b in enumerate(bits) if b in ("1", "True")]
    doc = json.loads(run_ibwire("health", capture, "-T", "json", unwrapped=True).stdout)
    assert {port: d["pfc_enabled"] for port, d in doc["dcbx"].items()} == want and len(want) == 24


def _layers_of(text: str) -> list:
    return [dict(dict(dict(p)["_source"])["layers"]) for p in json.loads(text, object_pairs_hook=lambda p: p)]


def test_json_layers_are_tsharks(capture, tshark):
    """-T json: the lldp and macc layers are tshark's, key for key in its order and nesting (a subtree per
    TLV titled as tshark titles it, application entries and CEE sub-TLVs in theirs, the class-enable
    vector's `_tree`, `CBFC Class Pause Times`), every value tshark's text."""
    theirs = _layers_of(
        subprocess.run(
            [tshark, "-r", str(capture), "-n", "-T", "json"], capture_output=True, text=True, check=True
        ).stdout
    )
    ours = _layers_of(run_ibwire("decode", capture, "-T", "json", check=True, unwrapped=True).stdout)
    assert len(ours) == len(theirs) == 96
    for n, (t, o) in enumerate(zip(theirs, ours), 1):
        name = "lldp" if "lldp" in t else "macc"
        assert o[name] == t[name], n


def ek_object(line: str, name: str):
    """The text of protocol `name`'s object in a -T ek packet line, as written (None when absent)."""
    key = f'"{name}":'
    if key not in line:
        return None
    at = line.index(key) + len(key)
    return line[at : json.JSONDecoder().raw_decode(line, at)[1]]


def test_ek_objects_are_tsharks_byte_for_byte(capture, tshark):
    """-T ek: the lldp and macc objects are tshark's byte for byte: a protocol's subtrees merged, each field
    key once with the list of every TLV's values (`lldp_lldp_tlv_type`), the subtree titles under `text`."""
    theirs = subprocess.run([tshark, "-r", str(capture), "-n", "-T", "ek"], capture_output=True, text=True, check=True)
    ours = run_ibwire("decode", capture, "-T", "ek", check=True, unwrapped=True).stdout
    for name in ("lldp", "macc"):
        want = [ek_object(x, name) for x in theirs.stdout.splitlines() if x.startswith('{"timestamp"')]
        got = [ek_object(x, name) for x in ours.splitlines() if x.startswith('{"timestamp"')]
        assert len(got) == len(want) == 96 and got == want, name


def _sections(text: str, names=("Link Layer Discovery Protocol", "MAC Control")) -> list:
    """The -V lines of the named top-level sections, frame by frame (tshark's expert items left out)."""
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith("Frame "):
            out.append([])
        if line and not line.startswith(" "):
            keep = line in names
        if keep and out and line.strip() and not line.strip().startswith("["):
            out[-1].append(line)
    return out


def test_tree_sections_are_tsharks(capture, tshark):
    """-V: the LLDP and MAC Control sections are tshark's lines, indentation included."""
    theirs = subprocess.run([tshark, "-r", str(capture), "-n", "-V"], capture_output=True, text=True, check=True).stdout
    ours = run_ibwire("decode", capture, "-V", check=True, unwrapped=True).stdout
    assert _sections(ours) == _sections(theirs)


@pytest.mark.parametrize(
    "select",
    [("-e", "lldp.tlv.type", "-e", "macc.cbfc.pause_time.c3"), ("-j", "lldp macc"), ("-J", "lldp macc")],
    ids=["e", "j", "J"],
)
def test_selection_json_is_tsharks(select, tshark):
    """-e, -j and -J on a capture of LLDP, PFC and RoCE frames: byte for byte tshark's (a frame without the
    selected fields is `"layers": {}`, a TLV's subtree folded to its title under -j)."""
    path = ROOT / "captures" / "pfc-storm.pcap"
    args = ["-T", "json", "-c", "40", *select]
    ours = run_ibwire("decode", path, *args, check=True, unwrapped=True).stdout
    assert (
        ours
        == subprocess.run([tshark, "-r", str(path), "-n", *args], capture_output=True, text=True, check=True).stdout
    )
