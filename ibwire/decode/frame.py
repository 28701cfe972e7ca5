"""The detail path: one frame → scapy layers → Wireshark-named fields, a summary line and errors.

This builds a scapy object per packet, so it serves `decode`, evidence in reports and crafting; bulk
analysis uses `ibwire.decode.scan` instead.
"""

from typing import List, NamedTuple

from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.packet import NoPayload, Padding, Raw

import dissectors.layers  # noqa: F401  (registers the layer bindings)
from dissectors import BTH, GRH, ICRC, LRH, VCRC, lookup
from dissectors.base import IBLayer
from dissectors.dcb import MACControl, MACControlPause, MACControlPFC, pause_seconds
from dissectors.mad import MAD
from dissectors.numbers import LINKTYPE_ERF
from ibwire.decode.extents import Extents
from ibwire.decode.fields import layer_fields, nest_and_flatten
from ibwire.decode.fieldtypes import EITHER
from ibwire.decode.linktypes import LINKTYPES, apply_roce2_heuristic, first_layer
from ibwire.files import Frame
from ibwire.files.formats import erf_view_one

# Wireshark's names in frame.protocols, by scapy layer class ("eth:ethertype:ip:udp:infiniband"); the IB
# headers are one "infiniband", MADs belong to it; bytes no layer claims are "data".
WS_PROTOCOLS = {
    "Ether": "eth:ethertype",
    "Dot1Q": "vlan:ethertype",
    "CookedLinux": "sll:ethertype",
    "ERF": "erf",
    "IPoIB": "ethertype",
    "IP": "ip",
    "IPv6": "ipv6",
    "IPv6ExtHdrHopByHop": "ipv6.hopopts",
    "UDP": "udp",
    "TCP": "tcp",
    "ICMP": "icmp",
    "IPerror": "ip",  # the datagram an ICMP error carries, as tshark names its layers
    "IPerror6": "ipv6",
    "UDPerror": "udp",
    "TCPerror": "tcp",
    "ARP": "arp",
    "LRH": "infiniband",
    "GRH": "infiniband",
    "BTH": "infiniband",
    "MACControl": "macc",
    "MACControlPause": "macc",
    "MACControlPFC": "macc",
}


class Decoded(NamedTuple):
    frame: Frame
    packet: object  # scapy packet (None when nothing could be dissected)
    layers: dict  # nested {"bth": {...}, ...}
    flat: dict  # "bth.p_key" -> value, plus "frame.*"
    errors: List[str]
    summary: str
    notes: List[str] = []  # added by cross-frame analysis (e.g. RMPP reassembly)

    @property
    def line(self) -> str:
        return "  ".join([self.summary] + self.notes)

    def to_json(self) -> dict:
        f = self.frame
        return {
            "frame": f.number,
            "time": f.time,
            "caplen": f.caplen,
            "len": f.wirelen,
            "linktype": f.linktype,
            "layers": self.layers,
            "errors": self.errors,
        }


def dissect(frame: Frame):
    """The scapy packet for a frame, or (None, error) when its link type is unknown or dissection fails."""
    cls = first_layer(frame.linktype)
    if cls is None:
        return None, f"unsupported link type {frame.linktype}"
    try:
        pkt = cls(frame.data)
    except Exception as e:  # scapy raises on some damaged inputs; keep the bytes and say so
        return Raw(frame.data), f"malformed: {cls.__name__} could not be decoded ({type(e).__name__})"
    try:
        apply_roce2_heuristic(pkt)
    except Exception:
        pass
    return pkt, None


def _only_leftovers(layer) -> bool:
    """Is everything after `layer` the unread bytes of a header cut short (no trailer, no later header)?"""
    nxt = layer.payload
    while isinstance(nxt, Raw) and not isinstance(nxt, Padding):
        nxt = nxt.payload
    return isinstance(nxt, NoPayload)


def _malformed(pkt, captured_short: bool) -> List[str]:
    """Why the packet is malformed: its BTH's length rule (dissectors.decisions), or a header cut short
    before the bytes its packet declares end.  A header cut where the capture ends is truncation."""
    if BTH in pkt and pkt[BTH].malformed:
        return [f"malformed: {pkt[BTH].malformed}"]
    layer = pkt
    while layer is not None and not isinstance(layer, (Raw, NoPayload)):
        nxt = layer.payload
        cut = getattr(layer, "truncated", None) and (isinstance(layer, (IBLayer, MAD)))
        want = None
        if not cut and isinstance(nxt, Raw) and not isinstance(nxt, Padding):
            try:
                want = layer.guess_payload_class(bytes(nxt.load))
            except Exception:
                want = None
            if want is not None and issubclass(want, Raw):
                want = None
        if cut or want:
            if captured_short and _only_leftovers(layer if cut else nxt):
                return []
            if cut:
                return [f"malformed: {type(layer).__name__} header cut short (no {layer.truncated})"]
            return [f"malformed: {want.__name__} header cut short ({len(nxt.load)} bytes)"]
        layer = nxt
    return []


def _endpoints(pkt):
    """Addresses of the outermost network header: LIDs (or GIDs) on IB, IPs on RoCEv2, GIDs on RoCEv1."""
    if LRH in pkt:
        if GRH in pkt:
            return pkt[GRH].sgid, pkt[GRH].dgid
        return f"LID {pkt[LRH].slid}", f"LID {pkt[LRH].dlid}"
    if GRH in pkt:
        return pkt[GRH].sgid, pkt[GRH].dgid
    for cls in (IP, IPv6):
        if cls in pkt:
            return pkt[cls].src, pkt[cls].dst
    return "?", "?"


def _qos(flat) -> List[str]:
    """The traffic class a RoCE frame travels in: VLAN PCP (802.1Q) and DSCP (IP, IPv6 or RoCEv1 GRH)."""
    out = [f"PCP {flat['vlan.priority']}"] if flat.get("vlan.priority") is not None else []
    for key in ("ip.dsfield.dscp", "ipv6.tclass.dscp"):
        if flat.get(key) is not None:
            return out + [f"DSCP {flat[key]}"]
    if flat.get("grh.tclass") is not None and "lrh" not in flat:
        out.append(f"DSCP {flat['grh.tclass'] >> 2}")
    return out


def _control_summary(pkt, flat) -> str:
    """MAC control (PAUSE, PFC) and LLDP frames: addresses, then what they say."""
    parts = [f"{flat.get('eth.src', '?')} → {flat.get('eth.dst', '?')}"]
    parts += [f"PCP {flat['vlan.priority']}"] if flat.get("vlan.priority") is not None else []
    if MACControlPFC in pkt:
        layer = pkt[MACControlPFC]
        prio = layer.priorities()
        parts.append(layer.mysummary())
        if any(prio.values()):
            longest = max(prio.values())
            parts.append(
                f"(up to {pause_seconds(longest, layer.port_speed) * 1e6:.3g} µs at {layer.port_speed / 1e9:g} Gb/s)"
            )
    elif MACControlPause in pkt:
        layer = pkt[MACControlPause]
        parts += [
            layer.mysummary(),
            f"({pause_seconds(layer.pause_time, layer.port_speed) * 1e6:.3g} µs at {layer.port_speed / 1e9:g} Gb/s)",
        ]
    elif MACControl in pkt:
        parts.append(f"MAC control opcode 0x{pkt[MACControl].opcode:04x}")
    else:
        parts.append("LLDP " + " ".join(_lldp_items(flat)))
    return "  ".join(parts)


def _values(v) -> list:
    return v if isinstance(v, list) else [] if v is None else [v]


def _lldp_items(flat):
    if flat.get("lldp.port.id") is not None or flat.get("lldp.port.id.mac") is not None:
        yield f"port {flat.get('lldp.port.id', flat.get('lldp.port.id.mac'))}"
    pfc = [p for p in range(8) if 1 in _values(flat.get(f"lldp.dcbx.feature.pfc.prio{p}"))]
    if "lldp.dcbx.ieee.pfc.numtcs" in flat or "lldp.dcbx.feature.pfc.numtcs" in flat:
        yield ("CEE " if "lldp.dcbx.proto" in flat else "") + "PFC on " + (",".join(map(str, pfc)) or "no priority")
    if "lldp.dcbx.ieee.ets.maxtcs" in flat:
        yield "ETS"
    apps = flat.get("lldp.dcbx.ieee.app.prio")
    if apps is not None:
        yield f"APP {len(apps) if isinstance(apps, list) else 1} entries"


def _summary(pkt, flat, errors) -> str:
    if BTH not in pkt:
        if MACControl in pkt or "lldp" in flat:
            return _control_summary(pkt, flat)
        return pkt.summary() if pkt is not None else ""
    bth = pkt[BTH]
    op = lookup(bth.opcode)
    src, dst = _endpoints(pkt)
    parts = [
        f"{src} → {dst}",
        f"{op.transport} {op.name}",
        f"QP=0x{bth.destqp:06x}",
        f"PSN={bth.psn}",
        f"P_Key 0x{bth.p_key:04x} {'full' if bth.p_key & 0x8000 else 'limited'}",
    ] + _qos(flat)
    mad = flat.get("mad.summary")
    if mad:
        parts.append(mad)
    flags = [
        name
        for name, on in (
            ("A", bth.a),
            ("SE", bth.se),
            ("FECN", bth.fecn),
            ("BECN", bth.becn),
            ("ECN-CE", flat.get("ip.dsfield.ecn") == 3 or flat.get("ipv6.tclass.ecn") == 3),
        )
        if on
    ]
    flags += [e.split(":")[0] if e.startswith("malformed") else e for e in errors]
    if flags:
        parts.append("[" + ", ".join(dict.fromkeys(flags)) + "]")
    return "  ".join(parts)


def decode_frame(frame: Frame) -> Decoded:
    """Decode one frame fully; never raises."""
    errors: List[str] = []
    if frame.caplen < frame.wirelen:
        errors.append(f"truncated: captured {frame.caplen} of {frame.wirelen} bytes")
    pkt, err = dissect(frame)
    if err:
        errors.append(err)
    if pkt is None:
        return Decoded(frame, None, {}, _frame_fields(frame, None), errors, errors[-1], [])
    try:
        entries = layer_fields(pkt)
        layers, flat = nest_and_flatten(entries)
    except Exception as e:
        layers, flat = {}, {}
        errors.append(f"malformed: fields could not be read ({type(e).__name__})")
    try:
        errors += _malformed(pkt, frame.caplen < frame.wirelen)
    except Exception:
        pass
    if BTH in pkt:
        op = lookup(pkt[BTH].opcode)
        if op.op == "unknown":
            errors.append(f"unknown opcode 0x{op.code:02x}")
        _crc_status(pkt, layers, flat, errors, "icrc", ICRC, frame)
        if LRH in pkt:
            _crc_status(pkt, layers, flat, errors, "vcrc", VCRC, frame)
    mad = _mad_summary(pkt)
    if mad:
        flat["mad.summary"] = mad
    flat.update(_frame_fields(frame, pkt))
    flat["frame.protocols"] = _protocols(pkt)
    _either_and_protocols(flat, errors)
    try:
        summary = _summary(pkt, flat, errors)
    except Exception:
        summary = "; ".join(errors) or "undecodable"
    return Decoded(frame, pkt, layers, flat, errors, summary, [])


def _protocols(pkt) -> str:
    """tshark's frame.protocols: the protocols of the frame, outermost first, joined by colons (the storage
    protocols in a payload are named by their trackers: upper_protocols)."""
    names = []
    layer = pkt
    while layer is not None and not isinstance(layer, NoPayload):
        cls = type(layer).__name__
        name = WS_PROTOCOLS.get(cls) or (
            "icmpv6" if cls.startswith("ICMPv6") else "lldp" if cls.startswith("LLDPDU") else None
        )
        if (cls == "Raw" and layer.load) or (cls.startswith("ICMPv6Echo") and layer.data):
            names += [name] if name else []
            name = "data"
        if name and not (names and names[-1] == name):
            names.append(name)
        layer = layer.payload
    return ":".join(names)


def upper_protocols(flat: dict, names: list) -> None:
    """frame.protocols once a storage tracker decoded the frame's payload: the protocols it called, outermost
    first and each once (`names`), in place of the payload's trailing `data`; protocols a dissector calls as
    functions rather than by handle (SCSI inside iSCSI) are not listed by tshark and not given here."""
    shown = str(flat.get("frame.protocols", "")).split(":")
    shown = shown[:-1] if shown[-1] == "data" else shown
    for name in names:
        if shown[-1] != name:
            shown.append(name)
    flat["frame.protocols"] = ":".join(shown)


def _either_and_protocols(flat: dict, errors: List[str]) -> None:
    """Wireshark's either-end fields (`ip.addr`, `udp.port` …), and the protocols a filter names bare:
    `infiniband` on every frame with an IB header, `_ws.malformed` on damaged ones."""
    for key, (a, b) in EITHER.items():
        both = [flat[k] for k in (a, b) if flat.get(k) is not None]
        if both:
            flat[key] = both
    if any(k in flat for k in ("lrh", "bth", "grh")):
        flat["infiniband"] = True
    if any(e.startswith("malformed") for e in errors):
        flat["_ws.malformed"] = True


def _crc_status(pkt, layers, flat, errors, key, cls, frame):
    if cls in pkt:
        layer = pkt[cls]
        status = "truncated" if frame.caplen < frame.wirelen else layer.status
    else:
        status = (
            "truncated" if frame.caplen < frame.wirelen or getattr(pkt[BTH], "_icrc_truncated", False) else "absent"
        )
        layers[key] = {"status": status}
    layers.setdefault(key, {})["status"] = status
    flat[f"{key}.status"] = status
    if status == "bad":
        errors.append(f"bad {key.upper()}")


def _mad_summary(pkt):
    try:
        from dissectors.mad import MAD
    except ImportError:
        return None
    if MAD in pkt:
        try:
            return pkt[MAD].mysummary()
        except Exception:
            return None
    return None


def _frame_fields(frame: Frame, pkt) -> dict:
    """Number, time, lengths and pcapng interface id as tshark shows them (an ERF record's without its ERF
    header and with its ERF timestamp: ibwire.files.formats.erf_view_one), and the protocols' bytes for
    display-filter slices and len() (`_ws.bytes`)."""
    caplen, wirelen, t = frame.caplen, frame.wirelen, frame.time
    if frame.linktype == LINKTYPE_ERF:
        hdr, ns = erf_view_one(frame.data)
        caplen, wirelen = caplen - min(hdr, caplen), wirelen - min(hdr, wirelen)
        t = ns / 1e9 if ns >= 0 else t
    out = {
        "frame.number": frame.number,
        "frame.time_epoch": t,
        "frame.cap_len": caplen,
        "frame.len": wirelen,
        "frame.linktype": frame.linktype,
        "_ws.bytes": Extents(frame.data, pkt),
    }
    if frame.iface is not None and frame.linktype != LINKTYPE_ERF:  # pcapng (ERF: numbered as they appear)
        out["frame.interface_id"] = frame.iface
    return out


__all__ = ["Decoded", "decode_frame", "dissect", "LINKTYPES"]
