"""LLDP and MAC Control layers in tshark 4.0's -T json shape (packet-lldp.c, packet-macctrl.c): each LLDP TLV
a subtree titled as tshark titles it (`Time To Live = 120 sec`, `IEEE - ETS Configuration`), an application
entry and a CEE DCBX sub-TLV each a subtree of their own; a PFC frame's class-enable vector with its bits
in `macc.cbfc.enbv_tree`, its pause times under `CBFC Class Pause Times`.  ibwire's pause lengths in
seconds are not tshark's and stay out (they are -V's ibwire section)."""

from typing import Optional

from scapy.contrib.lldp import LLDPDU

from dissectors.dcb import LLDPDUCEEDCBX, LLDPDUAppPriority, MACControl, MACControlPFC, _MACControlOp
from dissectors.dcbfacts import APP_NAMES, OUI_CEE, OUI_IEEE_802_1, OUI_IEEE_802_3, TLV_SYSTEM_CAPABILITIES
from dissectors.lldp_med import OUI_MEDIA
from dissectors.lldp_org import BR_WORD, TREES
from ibwire.decode.fields import FOREIGN
from ibwire.decode.fieldtypes import TSHARK_DISPLAY
from ibwire.report.packets import manuf
from ibwire.report.packets.ek_kinds import empty
from ibwire.report.packets.icmp_carried import Node
from ibwire.report.packets.tcp_options import SEVERITY, line
from ibwire.report.packets.values import value_text
from ibwire.report.packets.ws_labels import FIELDS, VALUES

PAUSE_TIMES = "CBFC Class Pause Times"  # packet-macctrl.c's subtree of the eight pause times
INVERSE = "Same in inverse (wrong) bitorder"  # packet-lldp.c's subtree of the PMD capabilities read backwards
WATTS = ("lldp.ieee.802_3.mdi_pde_requested", "lldp.ieee.802_3.mdi_pse_allocated")
# A power source's name, by the power type's direction (packet-lldp.c's media_power_pse_device, ..._pd_device)
PSE_SOURCES = {0: "Unknown", 1: "Primary Power Source", 2: "Backup Power Source"}
PD_SOURCES = {0: "Unknown", 1: "PSE", 2: "Local", 3: "PSE and Local"}
# A power source field -> (the power type field, the source names by power type: 802.3's Type 1/2 PSE and PD,
# LLDP-MED's PSE (0) and PD (1), its other types `Unknown`)
POWER_SOURCES = {
    "lldp.ieee.802_3.mdi_power_source": ("ieee.802_3.mdi_power_type", (PSE_SOURCES, PD_SOURCES) * 2),
    "lldp.media.power.source": ("media.power.type", (PSE_SOURCES, PD_SOURCES)),
}


def _expert(key: str, message: str, group: str, number: str) -> Node:
    """A warning packet-lldp.c adds (its -T json items, its -V title)."""
    return Node(
        f"[Expert Info (Warning/{group}): {message}]",
        [
            (key, empty(f"[{message}]")),
            ("_ws.expert.message", message),
            ("_ws.expert.severity", line(SEVERITY["Warning"], "[Severity level: Warning]")),
            ("_ws.expert.group", line(number, f"[Group: {group}]")),
        ],
    )


# A TLV IEEE 802.1AB-2009 moved elsewhere (802.3's link aggregation): under its subtype
DEPRECATED = _expert("lldp.tlv_deprecated", "TLV has been deprecated", "Protocol", "150994944")
EXCESS = "Invalid length, greater than expected"  # an 802.3 TLV longer than its layout: a text item at its end
EXCESS_ITEMS = [
    ("_ws.expert", _expert("lldp.excess_length", EXCESS, "Malformed", "117440512")),
    ("_ws.malformed", "Malformed Packet"),
]


def pairs(proto: str, fields: dict) -> list:
    """(key, text) of each field (`proto.name`), a list's values one after another, as tshark writes them."""
    items = []
    for k, v in fields.items():
        key = f"{proto}.{k}"
        for one in v if isinstance(v, list) else [v]:
            if one is not None:
                items.append((key, bool(one) if TSHARK_DISPLAY.get(key) == 1 else value_text(key, one)))
    return items


def dcb_layer(layer) -> Optional[tuple]:
    """("lldp", [(TLV title, its items)]) or ("macc", items) of an LLDP TLV or MAC Control layer, else None."""
    if isinstance(layer, LLDPDU) and (type(layer) in FOREIGN or hasattr(layer, "ws_fields")):
        fields = layer.ws_fields() if hasattr(layer, "ws_fields") else FOREIGN[type(layer)](layer)[1]
        return "lldp", [(_title(fields), _tlv_items(layer, fields))]
    if isinstance(layer, (MACControl, _MACControlOp)):
        return "macc", _macc_items(layer)
    return None


def _name(key: str, value: int, unknown: str) -> str:
    return VALUES.get(key, {}).get(value, unknown)


def _title(f: dict) -> str:
    """A TLV's subtree title, as packet-lldp.c words it from the TLV's own values."""
    kind = f["tlv.type"]
    if kind in (1, 2):
        what = "chassis" if kind == 1 else "port"
        ident = f.get(f"{what}.id.mac", f.get(f"{what}.id", ""))
        return (
            f"{what.title()} Subtype = {_name(f'lldp.{what}.subtype', f[f'{what}.subtype'], 'Reserved')}, Id: {ident}"
        )
    if kind == 3:
        return f"Time To Live = {f['time_to_live']} sec"
    if kind == TLV_SYSTEM_CAPABILITIES:
        return "Capabilities"
    text = f.get("port.desc", f.get("tlv.system.name", f.get("tlv.system.desc")))
    if text is not None:
        return f"{_name('lldp.tlv.type', kind, 'Unknown')} = {text}"
    if kind != 127:
        return _name("lldp.tlv.type", kind, "Unknown TLV")
    oui = f["orgtlv.oui"]
    if oui == OUI_IEEE_802_1:
        sub = f["ieee.802_1.subtype"]
        sub_name = _name("lldp.ieee.802_1.subtype", sub, f"Unknown subtype 0x{sub:x}")
    elif oui == OUI_IEEE_802_3 and "ieee.802_3.subtype" in f:
        sub = f["ieee.802_3.subtype"]
        sub_name = _name("lldp.ieee.802_3.subtype", sub, f"Unknown subtype 0x{sub:x}")
    elif oui == OUI_MEDIA and "media.subtype" in f:
        sub_name = _name("lldp.media.subtype", f["media.subtype"], "Unknown")
    elif oui == OUI_CEE and "dcbx.proto" in f:
        sub = f["dcbx.proto"]
        sub_name = _name("lldp.dcbx.proto", sub, f"Unknown subtype (0x{sub:x})")
    else:
        sub_name = f"Unknown ({f.get('unknown_subtype')})"
    return f"{manuf.vendor(oui) or 'Unknown'} - {sub_name}"


def _app_title(proto: int) -> str:
    return f"{APP_NAMES.get(proto, 'Unknown')} Application"


def _tlv_items(layer, fields: dict) -> list:
    """A TLV's items: its fields in wire order, application entries and CEE sub-TLVs as subtrees."""
    if isinstance(layer, LLDPDUAppPriority):
        head = {k: v for k, v in fields.items() if not isinstance(v, list)}
        return pairs("lldp", head) + [
            (
                _app_title(a.proto),
                pairs(
                    "lldp", {"dcbx.ieee.app.prio": a.prio, "dcbx.iee.app.sf": a.sel, "dcbx.feature.app.proto": a.proto}
                ),
            )
            for a in layer.apps
        ]
    if isinstance(layer, LLDPDUCEEDCBX):
        head = {k: fields[k] for k in ("tlv.type", "tlv.len", "orgtlv.oui", "dcbx.proto")}
        items = pairs("lldp", head)
        for sub, apps in layer.sub_tlvs():
            inner = pairs("lldp", sub) + [(_app_title(a["dcbx.feature.app.proto"]), pairs("lldp", a)) for a in apps]
            items.append((f"{_name('lldp.dcbx.type', sub['dcbx.type'], 'Unknown')} TLV", inner))
        return items
    fields = dict(fields)
    deprecated = fields.pop("tlv_deprecated", None) is not None
    excess = fields.pop("excess_length", None) is not None
    items = [(k, _worded(fields, k, v)) for k, v in _with_flag_trees(fields)]
    if deprecated:
        at = next(i for i, (k, _) in enumerate(items) if k.endswith(".subtype")) + 1
        items.insert(at, (items[at - 1][0] + "_tree", [("_ws.expert", DEPRECATED)]))
    return items + [(EXCESS, EXCESS_ITEMS)] if excess else items


def _worded(fields: dict, key: str, value):
    """An item packet-lldp.c words itself: a power via MDI item (802.3's, LLDP-MED's: the power source named by
    the power type, a PSE's or a PD's sources; a power value in watts or mW, tenths of a watt on the wire),
    802.3br's capabilities word followed by the names of its flags that are set; any other item as it is."""
    if key == "lldp." + BR_WORD:
        on = [FIELDS[f"lldp.{b}"][0] for b in TREES[BR_WORD] if fields[b] and FIELDS[f"lldp.{b}"][1] == "FT_BOOLEAN"]
        return line(value, ", ".join([f"{FIELDS[key][0]}: {value}", *on]))
    if key in WATTS:
        n = int(value)
        return line(value, f"{FIELDS[key][0]}: {n // 10}.{n % 10}. Watt")
    if key == "lldp.media.power.value":  # LLDP-MED's, in tenths of a watt
        return line(value, f"{FIELDS[key][0]}: {int(value) * 100} mW")
    if key in POWER_SOURCES:
        n = int(value)
        kind, tables = POWER_SOURCES[key]
        kind = fields[kind]
        name = tables[kind].get(n, "Reserved") if kind < len(tables) else "Unknown"
        return line(value, f"..{n:02b} .... = {FIELDS[key][0]}: {n} {name}")
    return value


def _with_flag_trees(fields: dict) -> list:
    """A TLV's fields in wire order, each flag word's bits (or its parts, dissectors.lldp_org.TREES) in its
    subtree (`lldp.<word>_tree`) and, for the PMD capabilities, the same bits read in inverse order in a
    subtree of their own, as packet-lldp.c adds them."""
    words = {k for k in fields if not k.endswith("subtype") and any(o.startswith(k + ".") for o in fields)}
    trees = {k: [b for b in fields if b.startswith(k + ".")] for k in words}
    trees.update({k: parts for k, parts in TREES.items() if k in fields})
    inside = {b for parts in trees.values() for b in parts}
    out = []
    for k, v in fields.items():
        if k in inside or k.rpartition(".")[0].endswith("_inv"):
            continue
        out += pairs("lldp", {k: v})
        if k in trees:
            out.append((f"lldp.{k}_tree", pairs("lldp", {b: fields[b] for b in trees[k]})))
            inverse = {b: fields[b] for b in fields if b.startswith(k + "_inv.")}
            if inverse:
                out.append((INVERSE, pairs("lldp", inverse)))
    return out


def _macc_items(layer) -> list:
    """The opcode, PAUSE's pause time, or PFC's class-enable vector (its bits in a subtree) and pause times."""
    fields = {k: v for k, v in layer.ws_fields().items() if "pause_s" not in k}  # ibwire's own seconds
    if not isinstance(layer, MACControlPFC):
        return pairs("macc", fields)
    bits = {k: v for k, v in fields.items() if k.startswith("cbfc.enbv.")}
    times = {k: v for k, v in fields.items() if k.startswith("cbfc.pause_time.")}
    return pairs("macc", {"cbfc.enbv": fields["cbfc.enbv"]}) + [
        ("macc.cbfc.enbv_tree", pairs("macc", bits)),
        (PAUSE_TIMES, pairs("macc", times)),
    ]
