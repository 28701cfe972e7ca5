"""The facts of PAUSE, PFC and LLDP DCBX frames without scapy: constants, a compact parse of LLDP DCBX
(`ibwire health` reads these rare frames this way; PAUSE and PFC it reads from the compiled records' MAC
control columns) and a build of all three for `ibwire synth`; dissectors.dcb is the scapy layer set for
`decode` and crafting, built on the same constants.

MAC control: IEEE 802.3 Annex 31B (PAUSE) and IEEE 802.1Qbb §36.1.3 (PFC): opcode, then for PFC a
class-enable vector (bit p: priority p) and eight pause times in quanta of 512 bit times.  LLDP: IEEE
802.1AB TLVs (7-bit type, 9-bit length); DCBX TLVs are type 127 with OUI 00-80-C2 (IEEE 802.1Qaz Annex D).
"""

import struct
from typing import Dict, List, Optional

from dissectors.numbers import (
    ETHERTYPE_LLDP,
    ETHERTYPE_MAC_CONTROL,
    ETHERTYPE_VLAN,
    ISCSI_PORT,
    MACC_OPCODE_PAUSE,
    MACC_OPCODE_PFC,
    VLAN_TPIDS,
)

PAUSE_DST = bytes.fromhex("0180c2000001")
LLDP_DST = bytes.fromhex("0180c200000e")
OPCODES = {MACC_OPCODE_PAUSE: "PAUSE", MACC_OPCODE_PFC: "PFC"}
QUANTUM_BITS = 512  # IEEE 802.3 §31B.2: one pause_quantum is 512 bit times
DEFAULT_PORT_SPEED = 100e9  # bit/s, for pause times in seconds when nothing says otherwise
OUI_IEEE_802_1 = 0x0080C2
OUI_IEEE_802_3 = 0x00120F
TLV_SYSTEM_CAPABILITIES = 7  # IEEE 802.1AB §8.5.8
# System capabilities, bit 0 up (IEEE 802.1AB Table 8-4), under Wireshark's names (lldp.tlv.system_cap.*)
LLDP_CAPABILITIES = (
    "other",
    "repeater",
    "bridge",
    "wlan_access_pt",
    "router",
    "telephone",
    "docsis_cable_device",
    "station_only",
)
SUB_802_1_PORT_VLAN, SUB_802_3_MAX_FRAME = 1, 4  # IEEE 802.1Q Annex D.2.1, IEEE 802.3 §79.3.4
SUB_802_1_PROTO_VLAN, SUB_802_1_VLAN_NAME, SUB_802_1_LINK_AGGREGATION = 2, 3, 7  # IEEE 802.1Q D.2.2, D.2.3, 802.1AX
SUB_802_1_PROTO_ID, SUB_802_1_CONGESTION = 4, 8  # IEEE 802.1Q D.2.4, D.2.7 (802.1Qau)
SUB_802_3_MAC_PHY, SUB_802_3_POWER, SUB_802_3_LINK_AGGREGATION, SUB_802_3_EEE = 1, 2, 3, 5  # IEEE 802.3 §79.3
SUB_802_3_BR = 7  # IEEE 802.3br §79.3.7: additional Ethernet capabilities (frame preemption)
# Flag words of these TLVs: (Wireshark's name, mask) of each bit or bit group, as packet-lldp.c reads them
PROTO_VLAN_FLAGS = (("supported", 0x02), ("enabled", 0x04))
AGGREGATION_FLAGS = (("cap", 0x01), ("enabled", 0x02), ("porttype", 0x0C))
AUTONEG_FLAGS = (("supported", 0x01), ("enabled", 0x02))
POWER_FLAGS = (("port_class", 0x01), ("supported", 0x02), ("enabled", 0x04), ("pse_pairs", 0x08))  # §79.3.2.1
# PMD auto-negotiation advertised capability (IEEE 802.3 §79.3.1.1.2, RFC 4836 ifMauAutoNegCapAdvertisedBits),
# bit 0 first as Wireshark reads the field; it also shows them "in inverse (wrong) bitorder" (`..._inv.*`).
PMD_CAPABILITIES = (
    "1000base_tfd",
    "1000base_t",
    "1000base_xfd",
    "1000base_x",
    "fdx_bpause",
    "fdx_spause",
    "fdx_apause",
    "fdx_pause",
    "100base_t2fd",
    "100base_t2",
    "100base_txfd",
    "100base_tx",
    "100base_t4",
    "10base_tfd",
    "10base_t",
    "other",
)
# Every flag word above under its Wireshark name after `lldp.ieee.`
LLDP_ORG_FLAGS = {
    "802_1.port_and_vlan_id_flag": PROTO_VLAN_FLAGS,
    "802_1.aggregation_status": AGGREGATION_FLAGS,
    "802_3.mac_phy_auto_neg_status": AUTONEG_FLAGS,
    "802_3.pmd_auto_neg_advertised_caps": tuple((name, 1 << i) for i, name in enumerate(PMD_CAPABILITIES)),
    "802_3.mdi_power_support": POWER_FLAGS,
    "802_3.aggregation_status": AGGREGATION_FLAGS[:2],
}
OUI_CEE, CEE_SUBTYPE = 0x001B21, 2  # the pre-standard CEE DCBX (DCBX 1.01): one TLV of sub-TLVs
CEE_CONTROL, CEE_PG, CEE_PFC, CEE_APP = 1, 2, 3, 4
SUB_ETS_CONFIG, SUB_ETS_RECOMMEND, SUB_PFC_CONFIG, SUB_APP_PRIORITY = 9, 10, 11, 12
# Applications Wireshark names in a DCBX application entry, by protocol ID (packet-lldp.c): FCoE and FIP
# (ethertypes 0x8906, 0x8914), iSCSI (port 3260).
APP_NAMES = {0x8906: "FCoE", 0x8914: "FiP", ISCSI_PORT: "iSCSI"}
ALL_PRIORITIES = -1  # an 802.3x PAUSE stops every priority
_PFC = struct.Struct(">HH8H")


def pause_seconds(quanta: int, speed: float = DEFAULT_PORT_SPEED) -> float:
    """How long `quanta` pause quanta stop a port running at `speed` bit/s."""
    return quanta * QUANTUM_BITS / speed


def _payload(frame: bytes):
    """(ethertype, offset of what follows it) of an Ethernet frame, past up to two VLAN tags."""
    at, etype = 14, int.from_bytes(frame[12:14], "big")
    for _ in range(2):
        if etype not in VLAN_TPIDS or len(frame) < at + 4:
            break
        etype, at = int.from_bytes(frame[at + 2 : at + 4], "big"), at + 4
    return etype, at


def lldp_tlvs(frame: bytes):
    """(type, value bytes) of each TLV of an LLDP frame, up to End of LLDPDU or the frame's end."""
    etype, at = _payload(frame)
    if etype != ETHERTYPE_LLDP:
        return
    while at + 2 <= len(frame):
        head = int.from_bytes(frame[at : at + 2], "big")
        kind, n = head >> 9, head & 0x1FF
        if kind == 0 or at + 2 + n > len(frame):
            return
        yield kind, frame[at + 2 : at + 2 + n]
        at += 2 + n


def cee_subtlvs(value: bytes):
    """(type, value) of each sub-TLV of a CEE DCBX TLV's value (after its OUI and subtype)."""
    at = 4
    while at + 2 <= len(value):
        head = int.from_bytes(value[at : at + 2], "big")
        kind, n = head >> 9, head & 0x1FF
        if at + 2 + n > len(value):
            return
        yield kind, value[at + 2 : at + 2 + n]
        at += 2 + n


def parse_dcbx(frame: bytes) -> dict:
    """What an LLDP frame's DCBX TLVs (IEEE, or CEE for PFC) configure: `pfc_enabled` (priorities), `willing`, `apps`
    ([(priority, selector, protocol)]), `ets_priority_tc` (traffic class of each priority)."""
    out: dict = {}
    for kind, v in lldp_tlvs(frame):
        if kind == 127 and len(v) >= 4 and int.from_bytes(v[:3], "big") == OUI_CEE and v[3] == CEE_SUBTYPE:
            for sub, w in cee_subtlvs(v):
                if sub == CEE_PFC and len(w) >= 5:
                    out["pfc_enabled"] = [p for p in range(8) if w[4] >> p & 1]
                    out["willing"] = bool(w[2] & 0x40)
            continue
        if kind != 127 or len(v) < 4 or int.from_bytes(v[:3], "big") != OUI_IEEE_802_1:
            continue
        sub = v[3]
        if sub == SUB_PFC_CONFIG and len(v) >= 6:
            out["pfc_enabled"] = [p for p in range(8) if v[5] >> p & 1]
            out["willing"] = bool(v[4] & 0x80)
        elif sub == SUB_APP_PRIORITY:
            out["apps"] = [
                (v[i] >> 5, v[i] & 7, int.from_bytes(v[i + 1 : i + 3], "big")) for i in range(5, len(v) - 2, 3)
            ]
        elif sub == SUB_ETS_CONFIG and len(v) >= 9:
            out["ets_priority_tc"] = [v[5 + p // 2] >> (4 * (1 - p % 2)) & 0xF for p in range(8)]
    return out


# ---- building (ibwire synth) --------------------------------------------------------------------------------


def _eth(src: bytes, dst: bytes, etype: int, body: bytes, vlan: Optional[int] = None, pcp: int = 0) -> bytes:
    tag = struct.pack(">HH", ETHERTYPE_VLAN, pcp << 13 | vlan) if vlan is not None else b""
    frame = dst + src + tag + struct.pack(">H", etype) + body
    return frame + bytes(max(0, 60 - len(frame)))  # the 64-byte minimum less the FCS


def pfc_frame(src: bytes, quanta: Dict[int, int]) -> bytes:
    """A PFC frame from MAC `src` pausing each priority of `quanta` for its quanta (0: XON)."""
    enbv = sum(1 << p for p in quanta)
    return _eth(
        src, PAUSE_DST, ETHERTYPE_MAC_CONTROL, _PFC.pack(MACC_OPCODE_PFC, enbv, *(quanta.get(p, 0) for p in range(8)))
    )


def pause_frame(src: bytes, quanta: int) -> bytes:
    """An 802.3x PAUSE frame from MAC `src`."""
    return _eth(src, PAUSE_DST, ETHERTYPE_MAC_CONTROL, struct.pack(">HH", MACC_OPCODE_PAUSE, quanta))


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack(">H", kind << 9 | len(value)) + value


def _org(sub: int, value: bytes) -> bytes:
    return _tlv(127, OUI_IEEE_802_1.to_bytes(3, "big") + bytes([sub]) + value)


def lldp_frame(
    src: bytes,
    port: str,
    pfc_enabled: List[int],
    apps=(),
    willing: bool = False,
    ttl: int = 120,
    priority_tc: Optional[List[int]] = None,
    bandwidth: Optional[List[int]] = None,
) -> bytes:
    """An LLDP frame from MAC `src` announcing DCBX ETS, PFC (enabled priorities) and application priorities."""
    tc = priority_tc or list(range(8))
    bw = bandwidth or [13, 13, 12, 50, 3, 3, 3, 3]
    ets = (
        bytes([(0x80 if willing else 0) | 0x07])
        + bytes(tc[i] << 4 | tc[i + 1] for i in range(0, 8, 2))
        + bytes(bw)
        + bytes([2] * 8)
    )
    pfc = bytes([(0x80 if willing else 0) | 8, sum(1 << p for p in pfc_enabled)])
    app = b"\0" + b"".join(bytes([prio << 5 | sel]) + proto.to_bytes(2, "big") for prio, sel, proto in apps)
    body = (
        _tlv(1, b"\x04" + src)
        + _tlv(2, b"\x05" + port.encode())
        + _tlv(3, struct.pack(">H", ttl))
        + _org(SUB_ETS_CONFIG, ets)
        + _org(SUB_PFC_CONFIG, pfc)
        + (_org(SUB_APP_PRIORITY, app) if apps else b"")
        + _tlv(0, b"")
    )
    return _eth(src, LLDP_DST, ETHERTYPE_LLDP, body)
