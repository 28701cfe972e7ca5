"""Differential: LLDP frames crafted here with the IEEE 802.1 and 802.3 TLVs beside DCBX (protocol identity,
congestion notification, power via MDI short and with 802.3at's and 802.3bt's extensions, 802.3 link
aggregation, EEE, 802.3br's capabilities, an unknown subtype; one a few bytes too long), LLDP-MED's
(capabilities, network policy, extended power, inventory) and a TLV of another organisation (titled by its
name in the manuf file, or `Unknown`) decode as tshark 4.0 shows them: -V lines, -T json layers, -T ek's
lldp object byte for byte, -T fields and -Y."""

import random
import struct
import subprocess

import pytest
from conftest import run_ibwire
from scapy.contrib.lldp import (
    LLDPDUChassisID,
    LLDPDUEndOfLLDPDU,
    LLDPDUGenericOrganisationSpecific,
    LLDPDUPortID,
    LLDPDUTimeToLive,
)
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap
from test_dcb_tshark import _layers_of, _sections, ek_object

IEEE_802_1, IEEE_802_3, MEDIA = 0x0080C2, 0x00120F, 0x0012BB
# Organisations packet-lldp.c has no dissector for (named from the manuf file, or not there), as switches and
# NICs send them: Mellanox, VMware, Broadcom, Arista, Juniper, Huawei, Dell, IEEE RA, two unregistered
OTHER_OUIS = (0x0002C9, 0x005056, 0x001018, 0x001C73, 0x000585, 0x00E0FC, 0x0019B9, 0x0050C2, 0x00AABB, 0x02ABCD)
FRAMES = 24
FIELDS = [
    "lldp.ieee.802_1.proto.id_length",
    "lldp.ieee.802_1.proto.id",
    "lldp.ieee.802_1qau.cnpv.prio3",
    "lldp.ieee.802_1qau.ready.prio6",
    "lldp.ieee.802_3.subtype",
    "lldp.ieee.802_3.mdi_power_support",
    "lldp.ieee.802_3.mdi_power_support.port_class",
    "lldp.ieee.802_3.mdi_power_support.pse_pairs",
    "lldp.ieee.802_3.mdi_pse_pair",
    "lldp.ieee.802_3.mdi_power_class",
    "lldp.ieee.802_3.mdi_power_type",
    "lldp.ieee.802_3.mdi_power_source",
    "lldp.ieee.802_3.mdi_power_priority",
    "lldp.ieee.802_3.mdi_pde_requested",
    "lldp.ieee.802_3.mdi_pse_allocated",
    "lldp.ieee.802_3.bt_ds_pse_allocated_power_value_alt_b",
    "lldp.ieee.802_3.bt_power_status",
    "lldp.ieee.802_3.bt_ds_pwr_class_ext_a",
    "lldp.ieee.802_3.bt_autoclass_reserved",
    "lldp.ieee.802_3.bt_power_down",
    "lldp.ieee.802_3.bt_power_down_time",
    "lldp.ieee.802_3.aggregation_status",
    "lldp.ieee.802_3.aggregation_status.cap",
    "lldp.ieee.802_3.aggregation_status.enabled",
    "lldp.ieee.802_3.aggregated_port_id",
    "lldp.tlv_deprecated",
    "lldp.excess_length",
    "lldp.ieee.802_3br.eac",
    "lldp.ieee.802_3br.aec.active",
    "lldp.ieee.802_3br.aec.addfragsize",
    *(f"lldp.ieee.802_3.eee.{n}" for n in ("transmit", "receive", "fallback_receive", "echo_transmit", "echo_receive")),
    "lldp.orgtlv.oui",
    "lldp.media.subtype",
    "lldp.media.subtype.caps",
    "lldp.media.subtype.caps.mid_pd",
    "lldp.media.subtype.class",
    "lldp.media.app_type",
    "lldp.media.policy_flag",
    "lldp.media.vlan_id",
    "lldp.media.dscp",
    "lldp.media.power.source",
    "lldp.media.power.value",
    "lldp.media.hardware",
    "lldp.media.model",
    "lldp.unknown_subtype",
    "lldp.unknown_subtype.content",
]


def _org(oui, sub, data):
    return LLDPDUGenericOrganisationSpecific(org_code=oui, subtype=sub, data=data)


def _frames(seed=11):
    rnd = random.Random(seed)
    out = []
    for i in range(FRAMES):
        src = f"02:00:00:00:01:{i:02x}"
        ident = rnd.randbytes(rnd.choice((0, 2, 5)))
        power = bytes([rnd.randrange(256), rnd.randrange(1, 3), rnd.randrange(7)])
        power_at = power + bytes([rnd.randrange(256)]) + struct.pack(">HH", rnd.randrange(600), rnd.randrange(600))
        out.append(
            Ether(src=src, dst="01:80:c2:00:00:0e")
            / LLDPDUChassisID(subtype=4, id=src)
            / LLDPDUPortID(subtype=5, id=f"eth{i}")
            / LLDPDUTimeToLive(ttl=120)
            / _org(IEEE_802_1, 4, bytes([len(ident)]) + ident)
            / _org(IEEE_802_1, 8, rnd.randbytes(2))
            / _org(IEEE_802_3, 2, power)
            / _org(IEEE_802_3, 2, power_at)
            / _org(IEEE_802_3, 2, power_at + rnd.randbytes(17))
            / _org(IEEE_802_3, 3, bytes([rnd.randrange(256)]) + struct.pack(">I", rnd.getrandbits(32)))
            / _org(IEEE_802_3, 5, struct.pack(">5H", *(rnd.getrandbits(16) for _ in range(5))))
            / _org(OTHER_OUIS[i % len(OTHER_OUIS)], rnd.randrange(256), rnd.randbytes(rnd.choice((0, 1, 3))))
            / _media(rnd, i)
            / _org(IEEE_802_3, *_longer(rnd))
            / _org(IEEE_802_3, 7, rnd.randbytes(2))
            / _org(IEEE_802_3, rnd.choice((6, 8, 9, 100, 255)), rnd.randbytes(rnd.randrange(3)))
            / LLDPDUEndOfLLDPDU()
        )
    return out


def _longer(rnd):
    """(subtype, bytes) of an IEEE 802.3 TLV a few bytes longer than its layout: tshark reads the layout, then
    adds its `Invalid length, greater than expected` item."""
    sub, n = rnd.choice(((1, 5), (2, 8), (3, 5), (4, 2), (5, 10)))
    return sub, rnd.randbytes(n + rnd.randrange(1, 5))


def _media(rnd, i):
    """LLDP-MED (TIA-1057): capabilities and class, a network policy, extended power, one inventory string."""
    text = "".join(rnd.choice("abcXYZ019 -.") for _ in range(rnd.randrange(1, 12))).encode()
    return (
        _org(MEDIA, 1, rnd.randbytes(2) + bytes([rnd.randrange(6)]))
        / _org(MEDIA, 2, bytes([rnd.randrange(10)]) + rnd.randbytes(3))
        / _org(MEDIA, 4, rnd.randbytes(3))
        / _org(MEDIA, 5 + i % 7, text)
    )


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("lldp_org") / "lldp-org.pcap"
    wrpcap(str(path), _frames())
    return path


def _tshark(tshark, capture, *args) -> str:
    return subprocess.run([tshark, "-r", str(capture), "-n", *args], capture_output=True, text=True, check=True).stdout


def _ibwire(capture, *args) -> str:
    return run_ibwire("decode", capture, *args, check=True, unwrapped=True).stdout


def test_tree_sections_are_tsharks(capture, tshark):
    """-V: every LLDP line tshark prints (power source named by the power type, watts, the deprecation's expert
    item under 802.3 link aggregation's subtype)."""
    ours, theirs = _ibwire(capture, "-V"), _tshark(tshark, capture, "-V")
    assert _sections(ours) == _sections(theirs)
    for expert in ("Protocol): TLV has been deprecated", "Malformed): Invalid length, greater than expected"):
        assert ours.count(f"[Expert Info (Warning/{expert}]") == theirs.count(f"[Expert Info (Warning/{expert}]") > 0


def test_json_layers_are_tsharks(capture, tshark):
    theirs, ours = _layers_of(_tshark(tshark, capture, "-T", "json")), _layers_of(_ibwire(capture, "-T", "json"))
    assert len(ours) == len(theirs) == FRAMES
    for n, (t, o) in enumerate(zip(theirs, ours), 1):
        assert o["lldp"] == t["lldp"], n


def test_ek_lldp_is_tsharks_byte_for_byte(capture, tshark):
    """-T ek merges a protocol's subtrees as tshark does: one key per field, a list of every TLV's values."""
    theirs = [ek_object(x, "lldp") for x in _tshark(tshark, capture, "-T", "ek").splitlines() if '"lldp":' in x]
    ours = [ek_object(x, "lldp") for x in _ibwire(capture, "-T", "ek").splitlines() if '"lldp":' in x]
    assert len(ours) == len(theirs) == FRAMES
    assert ours == theirs


def test_fields_and_filters_are_tsharks(capture, tshark):
    args = [a for k in FIELDS for a in ("-e", k)]
    assert _ibwire(capture, "-T", "fields", *args) == _tshark(tshark, capture, "-T", "fields", *args)
    for expr in (
        "lldp.ieee.802_3.mdi_power_support.port_class && lldp.ieee.802_3.mdi_power_type == 3",
        "lldp.ieee.802_3.mdi_pde_requested > 300 || lldp.ieee.802_1.proto.id_length == 0",
        "lldp.ieee.802_3.aggregation_status.enabled && lldp.ieee.802_3.eee.transmit < 30000",
        "lldp.unknown_subtype.content || lldp.orgtlv.oui == 0x005056",
        "lldp.ieee.802_1qau.cnpv.prio0 && !lldp.ieee.802_1qau.ready.prio7",
        "lldp.ieee.802_3.bt_pd_powered_status == 2 || lldp.ieee.802_3.bt_autoclass_request",
        "lldp.media.tag_flag && lldp.media.l2_prio > 3 || lldp.media.sn",
        "lldp.excess_length && lldp.ieee.802_3.max_frame_size",
        "lldp.ieee.802_3br.aec.support && lldp.ieee.802_3br.aec.addfragsize == 2",
    ):
        select = ("-Y", expr, "-T", "fields", "-e", "frame.number")
        assert _ibwire(capture, *select) == _tshark(tshark, capture, *select), expr
