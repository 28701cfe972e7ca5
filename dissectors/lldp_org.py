"""The IEEE 802.1 and 802.3 organisationally specific LLDP TLVs (IEEE 802.1AB §8.6) other than DCBX, read
from a TLV's bytes after its OUI and subtype into Wireshark 4.0's field names (packet-lldp.c, without the
`lldp.` prefix): 802.1 port VLAN, port and protocol VLAN, VLAN name, protocol identity, link aggregation,
congestion notification;
802.3 MAC/PHY configuration/status, power via MDI (with the 802.3at and 802.3bt extensions the TLV holds), link
aggregation, maximum frame size, EEE.  A TLV too short for its layout gives no fields (shown as its
subtype alone).  DCBX TLVs are scapy layers of their own (dissectors.dcb).
"""

from dissectors import lldp_med
from dissectors.dcbfacts import (
    LLDP_ORG_FLAGS,
    OUI_IEEE_802_1,
    OUI_IEEE_802_3,
    PMD_CAPABILITIES,
    SUB_802_1_CONGESTION,
    SUB_802_1_LINK_AGGREGATION,
    SUB_802_1_PORT_VLAN,
    SUB_802_1_PROTO_ID,
    SUB_802_1_PROTO_VLAN,
    SUB_802_1_VLAN_NAME,
    SUB_802_3_BR,
    SUB_802_3_EEE,
    SUB_802_3_LINK_AGGREGATION,
    SUB_802_3_MAC_PHY,
    SUB_802_3_MAX_FRAME,
    SUB_802_3_POWER,
)

POWER_SHORT, POWER_AT, POWER_BT = 3, 8, 25  # bytes of a power via MDI TLV after its subtype: 802.3AB's, at's, bt's
BT_VALUES = (  # 802.3bt's (§79.3.2.6-10) dual-signature power values, each 2 bytes from byte 8, in tenths of a watt
    "ds_pd_requested_power_value_mode_a",
    "ds_pd_requested_power_value_mode_b",
    "ds_pse_allocated_power_value_alt_a",
    "ds_pse_allocated_power_value_alt_b",
)
# 802.3bt's words after them: (name, byte offset, bytes, its parts as (name, mask)), as packet-lldp.c names them
BT_WORDS = (
    (
        "power_status",
        16,
        2,
        (
            ("pse_powering_status", 0xC000),
            ("pd_powered_status", 0x3000),
            ("pse_power_pairs_ext", 0x0C00),
            ("ds_pwr_class_ext_a", 0x0380),
            ("ds_pwr_class_ext_b", 0x0070),
            ("pwr_class_ext_", 0x000F),
        ),
    ),
    ("system_setup", 18, 1, (("power_type_ext", 0x0E),)),
    ("pse_maximum_available_power_value", 19, 2, ()),
    (
        "autoclass",
        21,
        1,
        (
            ("pse_autoclass_support", 4),
            ("autoclass_completed", 2),
            ("autoclass_request", 1),
            ("autoclass_reserved", 0xF8),
        ),
    ),
    ("power_down", 22, 3, (("power_down_request", 0xFC0000), ("power_down_time", 0x3FFFF))),
)
# Each 802.3bt word with parts -> its parts' names: the subtree tshark draws under the word's line
TREES = {f"ieee.802_3.bt_{w}": tuple(f"ieee.802_3.bt_{n}" for n, _ in parts) for w, _, _, parts in BT_WORDS if parts}
# 802.3br's additional Ethernet capabilities word and its parts (preemption support, enabled, active; the
# additional fragment size), which Wireshark names `aec` under the word's `eac`
BR_WORD = "ieee.802_3br.eac"
BR_PARTS = (("support", 1), ("enable", 2), ("active", 4), ("addfragsize", 0x18), ("reserved", 0xFFE0))
TREES[BR_WORD] = tuple(f"ieee.802_3br.aec.{n}" for n, _ in BR_PARTS)
KNOWN_802_3 = (
    SUB_802_3_MAC_PHY,
    SUB_802_3_POWER,
    SUB_802_3_LINK_AGGREGATION,
    SUB_802_3_MAX_FRAME,
    SUB_802_3_EEE,
    SUB_802_3_BR,
)
EEE = ("transmit", "receive", "fallback_receive", "echo_transmit", "echo_receive")  # 802.3 §79.3.5, in µs
# The plain numbers (not flag words) these TLVs add, under Wireshark's names after `lldp.`
NUMBERS = (
    "ieee.802_1.proto.id_length",
    "ieee.802_3.mdi_pse_pair",
    "ieee.802_3.mdi_power_class",
    "ieee.802_3.mdi_power_type",
    "ieee.802_3.mdi_power_source",
    "ieee.802_3.mdi_power_priority",
    "ieee.802_3.mdi_pde_requested",
    "ieee.802_3.mdi_pse_allocated",
    "ieee.802_3.aggregated_port_id",
    *(f"ieee.802_3.eee.{n}" for n in EEE),
    *(f"ieee.802_3.bt_{n}" for n in BT_VALUES),
    *(f"ieee.802_3.bt_{w}" for w, _, _, _ in BT_WORDS),
    *(name for parts in TREES.values() for name in parts),
    *lldp_med.NUMBERS,
    BR_WORD,
    "ieee.802_3br.aec.addfragsize",
    "ieee.802_3br.aec.reserved",
)
EXPERTS = ("tlv_deprecated", "excess_length")  # Wireshark's expert items of these TLVs (FT_NONE)
# Single bits shown as booleans: Congestion Notification's per-priority CNPV capability and ready indicator,
# LLDP-MED's capabilities and policy flags
CONGESTION = tuple(f"ieee.802_1qau.{word}.prio{p}" for word in ("cnpv", "ready") for p in range(8))
BITS = (*CONGESTION, *lldp_med.BITS, *(f"ieee.802_3br.aec.{n}" for n in ("support", "enable", "active")))
STRINGS = lldp_med.STRINGS
# How tshark writes these fields' values: 1 a boolean, n > 1 hexadecimal with n digits
DISPLAY = {
    **dict.fromkeys(BITS, 1),
    **lldp_med.DISPLAY,
    **{f"ieee.802_3.bt_{k}": n for k, n in (("power_status", 4), ("system_setup", 2), ("autoclass", 2))},
    **{f"ieee.802_3.bt_{k}": n for k, n in (("autoclass_reserved", 2), ("power_down", 6))},
    BR_WORD: 4,
    "ieee.802_3br.aec.reserved": 4,
}


def flags(word: str, value: int) -> dict:
    """A flag word of dissectors.dcbfacts.LLDP_ORG_FLAGS and each of its bits (or bit groups, shifted down)."""
    key = f"ieee.{word}"
    return {key: value, **{f"{key}.{n}": (value & m) >> ((m & -m).bit_length() - 1) for n, m in LLDP_ORG_FLAGS[word]}}


def _u(data: bytes, at: int, n: int) -> int:
    return int.from_bytes(data[at : at + n], "big")


def org_802_1(sub: int, data: bytes) -> dict:
    """IEEE 802.1 TLVs (IEEE 802.1Q Annex D, 802.1AX): port VLAN, port and protocol VLAN, VLAN name, protocol
    identity, link aggregation, congestion notification (per priority: CNPV capable, ready)."""
    if sub == SUB_802_1_PORT_VLAN and len(data) >= 2:
        return {"ieee.802_1.port_vlan.id": _u(data, 0, 2)}
    if sub == SUB_802_1_PROTO_VLAN and len(data) >= 3:
        return {**flags("802_1.port_and_vlan_id_flag", data[0]), "ieee.802_1.port_proto_vlan.id": _u(data, 1, 2)}
    if sub == SUB_802_1_VLAN_NAME and len(data) >= 3 and len(data) >= 3 + data[2]:
        return {
            "ieee.802_1.vlan.id": _u(data, 0, 2),
            "ieee.802_1.vlan.name_len": data[2],
            "ieee.802_1.vlan.name": data[3 : 3 + data[2]].decode("utf-8", "replace"),
        }
    if sub == SUB_802_1_PROTO_ID and data and len(data) >= 1 + data[0]:
        out = {"ieee.802_1.proto.id_length": data[0]}
        if data[0]:
            out["ieee.802_1.proto.id"] = data[1 : 1 + data[0]]
        return out
    if sub == SUB_802_1_CONGESTION and len(data) >= 2:
        return {name: data[i // 8] >> i % 8 & 1 for i, name in enumerate(CONGESTION)}
    if sub == SUB_802_1_LINK_AGGREGATION and len(data) >= 5:
        return {**flags("802_1.aggregation_status", data[0]), "ieee.802_1.aggregated_port_id": _u(data, 1, 4)}
    return {}


def _power(data: bytes) -> dict:
    """Power via MDI (802.3 §79.3.2): support bits, pair, class; with 802.3at's type, source, priority and the
    requested and allocated power in tenths of a watt; with 802.3bt's dual-signature values, power status,
    system setup, maximum available power, autoclass and power down."""
    out = {
        **flags("802_3.mdi_power_support", data[0]),
        "ieee.802_3.mdi_pse_pair": data[1],
        "ieee.802_3.mdi_power_class": data[2],
    }
    if len(data) >= POWER_AT:  # 802.3at's
        out.update(
            {
                "ieee.802_3.mdi_power_type": data[3] >> 6,
                "ieee.802_3.mdi_power_source": data[3] >> 4 & 3,
                "ieee.802_3.mdi_power_priority": data[3] & 0xF,
                "ieee.802_3.mdi_pde_requested": _u(data, 4, 2),
                "ieee.802_3.mdi_pse_allocated": _u(data, 6, 2),
            }
        )
    if len(data) >= POWER_BT:  # 802.3bt's
        out.update({f"ieee.802_3.bt_{n}": _u(data, 8 + 2 * i, 2) for i, n in enumerate(BT_VALUES)})
        for word, at, size, parts in BT_WORDS:
            value = _u(data, at, size)
            out[f"ieee.802_3.bt_{word}"] = value
            out.update({f"ieee.802_3.bt_{n}": (value & m) >> ((m & -m).bit_length() - 1) for n, m in parts})
    return out


def _802_3(sub: int, data: bytes) -> tuple:
    """(fields, bytes read) of an IEEE 802.3 TLV: its layout's fields, ({}, 0) for a subtype without one, (None,
    0) for a known subtype too short for its layout."""
    if sub == SUB_802_3_MAC_PHY and len(data) >= 5:
        caps = _u(data, 1, 2)
        return {
            **flags("802_3.mac_phy_auto_neg_status", data[0]),
            **flags("802_3.pmd_auto_neg_advertised_caps", caps),
            **{
                f"ieee.802_3.pmd_auto_neg_advertised_caps_inv.{n}": caps >> (15 - i) & 1
                for i, n in enumerate(PMD_CAPABILITIES)
            },
            "ieee.802_3.pmd_mau_type": _u(data, 3, 2),
        }, 5
    if sub == SUB_802_3_POWER and (len(data) == POWER_SHORT or len(data) >= POWER_AT):
        used = len(data) if len(data) in (POWER_SHORT, POWER_BT) else POWER_AT  # longer: 802.3at's and excess
        return _power(data[:used]), used
    if sub == SUB_802_3_LINK_AGGREGATION and len(data) >= 5:
        agg = {**flags("802_3.aggregation_status", data[0]), "ieee.802_3.aggregated_port_id": _u(data, 1, 4)}
        return {"tlv_deprecated": 1, **agg}, 5  # 802.1AB-2009 moved it to 802.1: Wireshark's expert item
    if sub == SUB_802_3_MAX_FRAME and len(data) >= 2:
        return {"ieee.802_3.max_frame_size": _u(data, 0, 2)}, 2
    if sub == SUB_802_3_EEE and len(data) >= 2 * len(EEE):
        return {f"ieee.802_3.eee.{n}": _u(data, 2 * i, 2) for i, n in enumerate(EEE)}, 2 * len(EEE)
    if sub == SUB_802_3_BR and len(data) >= 2:
        word = _u(data, 0, 2)
        parts = {k: (word & m) >> ((m & -m).bit_length() - 1) for k, (_, m) in zip(TREES[BR_WORD], BR_PARTS)}
        return {BR_WORD: word, **parts}, 2
    return None if sub in KNOWN_802_3 else {}, 0


def org_802_3(sub: int, data: bytes):
    """IEEE 802.3 TLVs (IEEE 802.3 §79.3): MAC/PHY configuration/status, power via MDI, link aggregation,
    maximum frame size, EEE, 802.3br's additional capabilities, any other subtype without fields;
    `excess_length` (Wireshark's expert item, -e shows 1) when the TLV holds more bytes than its layout.
    None for a known subtype too short for its layout (Wireshark stops there: a malformed packet)."""
    fields, used = _802_3(sub, data)
    if fields is None:
        return None
    return {**fields, "excess_length": 1} if len(data) > used else fields


def org_tlv(oui: int, sub: int, data: bytes) -> dict:
    """An organisationally specific TLV's fields after its type and length: an IEEE 802.1 one always by its
    subtype, an 802.3 or LLDP-MED one that way when read here (their readers give None otherwise), else its
    subtype and content as Wireshark shows one of an unknown organisation (no content line when empty)."""
    which = {
        OUI_IEEE_802_1: ("ieee.802_1.subtype", org_802_1),
        OUI_IEEE_802_3: ("ieee.802_3.subtype", org_802_3),
        lldp_med.OUI_MEDIA: ("media.subtype", lldp_med.org_media),
    }.get(oui)
    fields = which[1](sub, data) if which else None
    if fields is not None:
        return {"orgtlv.oui": oui, which[0]: sub, **fields}
    return {"orgtlv.oui": oui, "unknown_subtype": sub, **({"unknown_subtype.content": data.hex()} if data else {})}
