"""Lossless-Ethernet control frames: MAC control PAUSE and PFC, and the LLDP DCBX TLVs that configure them.

* MAC control (ethertype 0x8808, IEEE 802.3 Annex 31B): opcode 0x0001 PAUSE (one pause time) and 0x0101
  class-based flow control, i.e. IEEE 802.1Qbb PFC (a class-enable vector and eight pause times).  A pause
  quantum is 512 bit times, so its length in seconds depends on the port speed.
* LLDP (ethertype 0x88cc) is scapy's `scapy.contrib.lldp`; this module adds the IEEE 802.1Qaz DCBX TLVs
  (organisation-specific TLV 127, OUI 00-80-C2, Annex D): ETS configuration (subtype 9) and recommendation
  (10), PFC configuration (11), application priority table (12).

The constants and a scapy-free parse live in dissectors.dcbfacts.  Each layer's `ws_fields()` gives its fields under Wireshark 4.0's names (packet-macctrl.c, packet-lldp.c:
`macc.cbfc.pause_time.c3`, `lldp.dcbx.ieee.pfc.numtcs` …) without the protocol prefix `ws_proto`.
"""

from scapy.config import conf
from scapy.contrib.lldp import LLDPDU, LLDPDU_CLASS_TYPES
from scapy.fields import (
    BitEnumField,
    BitField,
    BitFieldLenField,
    ByteField,
    FieldListField,
    PacketListField,
    ShortField,
    StrLenField,
    ThreeBytesField,
    XByteField,
    XShortEnumField,
    XShortField,
)
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet, bind_layers

from dissectors.dcbfacts import (
    CEE_APP,
    CEE_CONTROL,
    CEE_PFC,
    CEE_PG,
    CEE_SUBTYPE,
    DEFAULT_PORT_SPEED,
    OPCODES,
    OUI_CEE,
    OUI_IEEE_802_1,
    SUB_APP_PRIORITY,
    SUB_ETS_CONFIG,
    SUB_ETS_RECOMMEND,
    SUB_PFC_CONFIG,
    cee_subtlvs,
    pause_seconds,
)
from dissectors.numbers import ETHERTYPE_MAC_CONTROL, MACC_OPCODE_PAUSE, MACC_OPCODE_PFC


def set_port_speed(speed: float) -> None:
    """The port speed (bit/s) the layers' `*pause_s` fields assume from now on."""
    _MACControlOp.port_speed = speed


# A frame that breaks 802.1AB's TLV order is decoded as far as it goes and flagged, never dropped whole
# (scapy's strict mode raises and the frame's Ethernet header would be lost with it).
conf.contribs["LLDP"].strict_mode_disable()


class MACControl(Packet):
    """MAC control frame header: the opcode (IEEE 802.3 §31.4.1.3)."""

    name = "MAC Control"
    ws_proto = "macc"
    fields_desc = [XShortEnumField("opcode", MACC_OPCODE_PFC, OPCODES)]

    def ws_fields(self) -> dict:
        return {"opcode": self.opcode}


class _MACControlOp(Packet):
    ws_proto = "macc"
    port_speed = DEFAULT_PORT_SPEED  # bit/s the `*pause_s` fields assume (`ibwire decode --port-speed`)

    def extract_padding(self, s):
        return b"", s  # the rest of the 46-byte minimum payload is padding


class MACControlPause(_MACControlOp):
    """802.3x PAUSE (Annex 31B): stop all traffic for `pause_time` quanta (0 resumes it)."""

    name = "PAUSE"
    fields_desc = [ShortField("pause_time", 0)]

    def ws_fields(self) -> dict:
        return {"pause_time": self.pause_time, "pause_s": pause_seconds(self.pause_time, self.port_speed)}

    def mysummary(self):
        return f"PAUSE {self.pause_time} quanta"


class MACControlPFC(_MACControlOp):
    """802.1Qbb PFC (§36.1.3): priority p is paused for pause_time[p] quanta when bit p of `enbv` is set."""

    name = "PFC"
    fields_desc = [
        XShortField("enbv", 0),
        FieldListField("pause_time", [0] * 8, ShortField("", 0), count_from=lambda pkt: 8),
    ]

    def priorities(self):
        """The enabled priorities, each with its pause time in quanta."""
        return {p: self.pause_time[p] for p in range(8) if self.enbv >> p & 1}

    def ws_fields(self) -> dict:
        out = {"cbfc.enbv": self.enbv}
        out.update({f"cbfc.enbv.c{p}": self.enbv >> p & 1 for p in range(8)})
        out.update({f"cbfc.pause_time.c{p}": q for p, q in enumerate(self.pause_time)})
        out.update({f"cbfc.pause_s.c{p}": pause_seconds(q, self.port_speed) for p, q in self.priorities().items()})
        return out

    def mysummary(self):
        prio = self.priorities()
        if not prio:
            return "PFC (no priority enabled)"
        return "PFC " + " ".join(f"P{p}:{'XON' if q == 0 else f'XOFF {q}'}" for p, q in prio.items())


bind_layers(Ether, MACControl, type=ETHERTYPE_MAC_CONTROL)
bind_layers(Dot1Q, MACControl, type=ETHERTYPE_MAC_CONTROL)
bind_layers(MACControl, MACControlPause, opcode=MACC_OPCODE_PAUSE)
bind_layers(MACControl, MACControlPFC, opcode=MACC_OPCODE_PFC)


# ---- LLDP DCBX (IEEE 802.1Qaz Annex D) ----------------------------------------------------------------------


def _org_header(subtype: int, length, length_of=None):
    return [
        BitEnumField("_type", 127, 7, LLDPDU.TYPES),
        BitFieldLenField("_length", length, 9, length_of=length_of, adjust=lambda pkt, x: x + 5),
        ThreeBytesField("org_code", OUI_IEEE_802_1),
        ByteField("subtype", subtype),
    ]


def _ets_tables():
    """Priority assignment (4 bits per priority), TC bandwidth (%), TSA per traffic class (D.2.8)."""
    return (
        [BitField(f"prio{p}", 0, 4) for p in range(8)]
        + [ByteField(f"bw{t}", 0) for t in range(8)]
        + [ByteField(f"tsa{t}", 0) for t in range(8)]
    )


class _DCBX(LLDPDU):
    ws_proto = "lldp"
    SUBTYPE = 0
    LENGTH = 0

    @classmethod
    def _match_organization_specific(cls, payload):
        return (
            len(payload) >= 6
            and payload[2:5] == OUI_IEEE_802_1.to_bytes(3, "big")
            and payload[5] == cls.SUBTYPE
            and ((payload[0] & 1) << 8 | payload[1]) == cls.LENGTH
        )

    def _header(self) -> dict:
        return {
            "tlv.type": 127,
            "tlv.len": self._length,
            "orgtlv.oui": self.org_code,
            "ieee.802_1.subtype": self.subtype,
        }

    def _ets(self) -> dict:
        out = {f"dcbx.feature.pg.pgid_prio{p}": getattr(self, f"prio{p}") for p in range(8)}
        out.update({f"dcbx.feature.pg.per{t}": getattr(self, f"bw{t}") for t in range(8)})
        out.update({f"dcbx.ieee.ets.tsa{t}": getattr(self, f"tsa{t}") for t in range(8)})
        return out


class LLDPDUETSConfiguration(_DCBX):
    """ETS Configuration TLV (D.2.8): willing, credit-based shaper support, max TCs, the three tables."""

    name = "LLDP ETS Configuration"
    SUBTYPE, LENGTH = SUB_ETS_CONFIG, 25
    fields_desc = (
        _org_header(SUB_ETS_CONFIG, 25)
        + [BitField("willing", 0, 1), BitField("cbs", 0, 1), BitField("reserved", 0, 3), BitField("maxtcs", 0, 3)]
        + _ets_tables()
    )

    def ws_fields(self) -> dict:
        return {
            **self._header(),
            "dcbx.ieee.willing": self.willing,
            "dcbx.ieee.ets.cbs": self.cbs,
            "dcbx.ieee.ets.maxtcs": self.maxtcs,
            **self._ets(),
        }


class LLDPDUETSRecommendation(_DCBX):
    """ETS Recommendation TLV (D.2.9): the tables a peer is asked to use."""

    name = "LLDP ETS Recommendation"
    SUBTYPE, LENGTH = SUB_ETS_RECOMMEND, 25
    fields_desc = _org_header(SUB_ETS_RECOMMEND, 25) + [XByteField("reserved", 0)] + _ets_tables()

    def ws_fields(self) -> dict:
        return {**self._header(), "dcbx.feature.pg.reserved": self.reserved >> 1, **self._ets()}  # bits 7-1


class LLDPDUPFCConfiguration(_DCBX):
    """PFC Configuration TLV (D.2.10): willing, MACsec bypass, PFC capability, the enabled priorities."""

    name = "LLDP PFC Configuration"
    SUBTYPE, LENGTH = SUB_PFC_CONFIG, 6
    fields_desc = _org_header(SUB_PFC_CONFIG, 6) + [
        BitField("willing", 0, 1),
        BitField("mbc", 0, 1),
        BitField("reserved", 0, 2),
        BitField("numtcs", 0, 4),
        ByteField("enable", 0),
    ]

    def ws_fields(self) -> dict:
        out = {
            **self._header(),
            "dcbx.ieee.willing": self.willing,
            "dcbx.ieee.pfc.mbc": self.mbc,
            "dcbx.ieee.pfc.numtcs": self.numtcs,
        }
        out.update({f"dcbx.feature.pfc.prio{p}": self.enable >> p & 1 for p in range(8)})
        return out


class DCBXApp(Packet):
    """One application priority entry (D.2.11): priority, selector, protocol ID."""

    name = "DCBX application"
    fields_desc = [BitField("prio", 0, 3), BitField("reserved", 0, 2), BitField("sel", 0, 3), XShortField("proto", 0)]

    def extract_padding(self, s):
        return b"", s


class LLDPDUAppPriority(_DCBX):
    """Application Priority TLV (D.2.11): which priority each application (ethertype, port, DSCP) uses."""

    name = "LLDP Application Priority"
    SUBTYPE = SUB_APP_PRIORITY
    fields_desc = _org_header(SUB_APP_PRIORITY, None, "apps") + [
        XByteField("reserved", 0),
        PacketListField("apps", [], DCBXApp, length_from=lambda pkt: pkt._length - 5),
    ]

    @classmethod
    def _match_organization_specific(cls, payload):
        return (
            len(payload) >= 6
            and payload[2:5] == OUI_IEEE_802_1.to_bytes(3, "big")
            and payload[5] == cls.SUBTYPE
            and ((payload[0] & 1) << 8 | payload[1]) >= 5
        )

    def ws_fields(self) -> dict:
        out = {**self._header(), "dcbx.ieee.app.reserved": self.reserved}
        for key, attr in (
            ("dcbx.ieee.app.prio", "prio"),
            ("dcbx.iee.app.sf", "sel"),
            ("dcbx.feature.app.proto", "proto"),
        ):
            out[key] = [getattr(a, attr) for a in self.apps]
        return out


class LLDPDUCEEDCBX(LLDPDU):
    """The pre-standard CEE DCBX TLV (DCBX 1.01, OUI 00-1B-21, subtype 2): sub-TLVs for control (sequence and
    acknowledgement numbers), priority groups, PFC and applications, each feature with version, enable,
    willing and error flags.  The sub-TLVs stay bytes; `ws_fields` reads them as Wireshark does."""

    name = "LLDP CEE DCBX"
    ws_proto = "lldp"
    fields_desc = [
        BitEnumField("_type", 127, 7, LLDPDU.TYPES),
        BitFieldLenField("_length", None, 9, length_of="subtlvs", adjust=lambda pkt, x: x + 4),
        ThreeBytesField("org_code", OUI_CEE),
        ByteField("subtype", CEE_SUBTYPE),
        StrLenField("subtlvs", b"", length_from=lambda pkt: (pkt._length or 4) - 4),
    ]

    @classmethod
    def _match_organization_specific(cls, payload):
        return len(payload) >= 6 and payload[2:5] == OUI_CEE.to_bytes(3, "big") and payload[5] == CEE_SUBTYPE

    def sub_tlvs(self) -> list:
        """Each sub-TLV as (its fields, [the fields of each application entry]) under Wireshark's names."""
        body = OUI_CEE.to_bytes(3, "big") + bytes([self.subtype]) + bytes(self.subtlvs)
        return [_cee_sub(kind, v) for kind, v in cee_subtlvs(body)]

    def ws_fields(self) -> dict:
        out: dict = {}
        for sub, apps in self.sub_tlvs():
            for fields in (sub, *apps):
                for key, value in fields.items():
                    out.setdefault(key, []).append(value)
        out = {k: v[0] if len(v) == 1 else v for k, v in out.items()}
        return {
            "tlv.type": 127,
            "tlv.len": self._length,
            "orgtlv.oui": self.org_code,
            "dcbx.proto": self.subtype,
            **out,
        }


def _cee_sub(kind: int, v: bytes) -> tuple:
    """One CEE sub-TLV's fields as Wireshark reads them: version, then control numbers or a feature's flags
    and its table (priority groups, PFC, applications)."""
    out, apps = {"dcbx.type": kind, "dcbx.len": len(v)}, []
    if len(v) >= 2:
        out.update({"dcbx.version": v[0], "dcbx.max_version": v[1]})
    if kind == CEE_CONTROL and len(v) >= 10:
        out.update(
            {"dcbx.control.seq": int.from_bytes(v[2:6], "big"), "dcbx.control.ack": int.from_bytes(v[6:10], "big")}
        )
    if kind not in (CEE_PG, CEE_PFC, CEE_APP) or len(v) < 4:
        return out, apps
    out.update(
        {f"dcbx.feature.{name}": v[2] >> bit & 1 for name, bit in (("enabled", 7), ("willing", 6), ("error", 5))}
    )
    out["dcbx.feature.subtype"] = v[3]
    if kind == CEE_PG and len(v) >= 17:
        out.update({f"dcbx.feature.pg.pgid_prio{p}": v[4 + p // 2] >> (4 * (1 - p % 2)) & 0xF for p in range(8)})
        out.update({f"dcbx.feature.pg.per{g}": v[8 + g] for g in range(8)})
        out["dcbx.feature.pg.numtcs"] = v[16]
    elif kind == CEE_PFC and len(v) >= 6:
        out.update({f"dcbx.feature.pfc.prio{p}": v[4] >> p & 1 for p in range(8)})
        out["dcbx.feature.pfc.numtcs"] = v[5]
    elif kind == CEE_APP:
        for at in range(4, len(v) - 5, 6):
            e = v[at : at + 6]
            app = {
                "dcbx.feature.app.proto": int.from_bytes(e[:2], "big"),
                "dcbx.feature.app.oui": (e[2] & 0xFC) << 16 | e[3] << 8 | e[4],
                "dcbx.feature.app.sf": e[2] & 3,
            }
            if e[5]:  # the lowest priority of the map, as Wireshark shows
                app["dcbx.feature.app.prio"] = (e[5] & -e[5]).bit_length() - 1
            apps.append(app)
    return out, apps


DCBX_TLVS = (LLDPDUETSConfiguration, LLDPDUETSRecommendation, LLDPDUPFCConfiguration, LLDPDUAppPriority, LLDPDUCEEDCBX)
# scapy's LLDP picks an organisation-specific class by trying its list in order; ours go first.  scapy's own
# power via MDI classes leave it: those TLVs are generic ones, read by dissectors.lldp_org as Wireshark does.
LLDPDU_CLASS_TYPES[127][:] = [
    *(c for c in DCBX_TLVS if c not in LLDPDU_CLASS_TYPES[127]),
    *(c for c in LLDPDU_CLASS_TYPES[127] if not c.__name__.startswith("LLDPDUPowerViaMDI")),
]
