"""LLDP-MED (ANSI/TIA-1057, OUI 00-12-BB): the TLVs a switch and an endpoint exchange, read from a TLV's bytes
after its OUI and subtype into Wireshark 4.0's field names (packet-lldp.c, without `lldp.`): capabilities
and device class, network policy (application, VLAN, priorities), extended power via MDI, inventory
strings.  Location identification (subtype 3) is not read here (its TLV shows as an unknown subtype).
"""

OUI_MEDIA = 0x0012BB
SUB_CAPABILITIES, SUB_POLICY, SUB_POWER = 1, 2, 4  # TIA-1057 §10.2.2-10.2.5
# Inventory TLVs (§10.2.6): subtype -> the string's field name
INVENTORY = {5: "hardware", 6: "firmware", 7: "software", 8: "sn", 9: "manufacturer", 10: "model", 11: "asset"}
CAPABILITIES = ("llpd", "network_policy", "location_id", "mdi_pse", "mid_pd", "inventory")  # bit 0 up
POLICY = (("policy_flag", 0x800000), ("tag_flag", 0x400000), ("vlan_id", 0x1FFE00), ("l2_prio", 0x1C0), ("dscp", 0x3F))
NUMBERS = (
    "media.subtype",
    "media.subtype.caps",
    "media.subtype.class",
    "media.app_type",
    *(f"media.{n}" for n, _ in POLICY[2:]),
    *(f"media.power.{n}" for n in ("type", "source", "prio", "value")),
)
BITS = (*(f"media.subtype.caps.{n}" for n in CAPABILITIES), "media.policy_flag", "media.tag_flag")
STRINGS = tuple(f"media.{n}" for n in INVENTORY.values())
DISPLAY = {"media.subtype": 2, "media.subtype.caps": 4}


def org_media(sub: int, data: bytes):
    """An LLDP-MED TLV's fields after its subtype (None when this one is not read or too short)."""
    if sub == SUB_CAPABILITIES and len(data) >= 3:
        caps = int.from_bytes(data[:2], "big")
        return {
            "media.subtype.caps": caps,
            **{f"media.subtype.caps.{n}": caps >> i & 1 for i, n in enumerate(CAPABILITIES)},
            "media.subtype.class": data[2],
        }
    if sub == SUB_POLICY and len(data) >= 4:
        word = int.from_bytes(data[1:4], "big")
        return {
            "media.app_type": data[0],
            **{f"media.{n}": (word & m) >> ((m & -m).bit_length() - 1) for n, m in POLICY},
        }
    if sub == SUB_POWER and len(data) >= 3:
        return {
            "media.power.type": data[0] >> 6,
            "media.power.source": data[0] >> 4 & 3,
            "media.power.prio": data[0] & 0xF,
            "media.power.value": int.from_bytes(data[1:3], "big"),
        }
    if sub in INVENTORY and data:
        return {f"media.{INVENTORY[sub]}": data.split(b"\0", 1)[0].decode("utf-8", "replace")}
    return None
