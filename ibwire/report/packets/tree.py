"""`-V` trees and `-x` hex dumps of fully decoded frames.

The tree is tshark's: the same document `-T json` writes (ibwire.report.packets.tshark_doc), each item shown as
Wireshark labels it (ibwire.report.packets.ws_labels, generated from Wireshark's field registrations): bit pictures
for fields under a bitmask, value strings, hexadecimal where the field is registered hexadecimal, generated
items in brackets, hidden items left out, four spaces per level.  Where a dissector words a line itself
(`Header Length: 20 bytes (5)`) its wording is in WORDED.  ibwire's own fields (not in Wireshark) follow
each frame's layers in the same style, as `ibwire.<field>`.
"""

import ipaddress
from functools import lru_cache

from dissectors.madnames import trap_title
from ibwire.report.escape import printable
from ibwire.report.packets import icmp_doc, iser_words, nvme_data_words, nvme_words, rpc_words, smb_words, tcp_doc
from ibwire.report.packets.dumps import DUMP_MARK, Dumps
from ibwire.report.packets.manuf import vendor
from ibwire.report.packets.own_words import own_line
from ibwire.report.packets.ws_labels import FIELDS, TFS, VALUES

IB = "infiniband."
WIDTHS = {
    "FT_UINT8": 8,
    "FT_UINT16": 16,
    "FT_UINT24": 24,
    "FT_UINT32": 32,
    "FT_UINT40": 40,
    "FT_UINT48": 48,
    "FT_UINT56": 56,
    "FT_UINT64": 64,
    "FT_INT8": 8,
    "FT_INT16": 16,
    "FT_INT24": 24,
    "FT_INT32": 32,
    "FT_INT64": 64,
}
HIDDEN = {
    "eth.addr_resolved",
    "eth.addr.oui",
    "eth.lg",
    "eth.ig",
    "eth.dst_resolved",
    "eth.src_resolved",
    "eth.dst.oui",
    "eth.src.oui",
    "eth.addr.oui_resolved",
    "eth.dst.oui_resolved",
    "eth.src.oui_resolved",
    "ip.addr",
    "ip.src_host",
    "ip.dst_host",
    "ip.host",
    "ipv6.addr",
    "ipv6.src_host",
    "ipv6.dst_host",
    "ipv6.host",
    "ip.version@ipv6",
    "ip.version@icmpv6",  # (an ICMPv6 error's datagram)
    "udp.port",
    "icmpv6.opt.src_linkaddr",
    "icmpv6.opt.target_linkaddr",
    "tcp.port",
    "udp.payload@hidden",
    "_ws.expert.message",
    "_ws.malformed",
}
GENERATED = (
    {
        "frame.offset_shift",
        "frame.time_delta",
        "frame.time_delta_displayed",
        "frame.time_relative",
        "frame.marked",
        "frame.ignored",
        "frame.protocols",
        "ip.checksum.status",
        "udp.checksum.status",
        "udp.stream",
        "udp.time_relative",
        "udp.time_delta",
        "data.len",
        "_ws.expert",
    }
    | nvme_words.GENERATED
    | rpc_words.GENERATED
    | smb_words.GENERATED
    | iser_words.GENERATED
)
# Bit pictures dissectors draw for fields registered without a bitmask: (mask, width in bits).
DRAWN = {"ip.version": (0xF0, 8), "ip.hdr_len": (0x0F, 8), "ipv6.version": (0xF0, 8)}
ECN = {0: "Not-ECT", 1: "ECT(1)", 2: "ECT(0)", 3: "CE"}
DSCP = {
    0: "CS0",
    8: "CS1",
    10: "AF11",
    12: "AF12",
    14: "AF13",
    16: "CS2",
    18: "AF21",
    20: "AF22",
    22: "AF23",
    24: "CS3",
    26: "AF31",
    28: "AF32",
    30: "AF33",
    32: "CS4",
    34: "AF41",
    36: "AF42",
    38: "AF43",
    40: "CS5",
    46: "EF",
    48: "CS6",
    56: "CS7",
}
SECONDS = {
    "frame.offset_shift",
    "frame.time_epoch",
    "frame.time_delta",
    "frame.time_delta_displayed",
    "frame.time_relative",
    "udp.time_relative",
    "udp.time_delta",
}


def _ds(v: str) -> str:
    n = int(v, 0)
    return f"0x{n:02x} (DSCP: {DSCP.get(n >> 2, 'Unknown')}, ECN: {ECN[n & 3]})"


def _ip_flags(v: str) -> str:
    n = int(v, 0)
    names = [s for bit, s in ((4, "Reserved"), (2, "Don't fragment"), (1, "More fragments")) if n & bit]
    return f"0x{n:x}" + (", " + ", ".join(names) if names else "")


def _syndrome(n: int) -> str:
    """AETH syndrome's kind as tshark names it (IBA §9.7.5.2.8)."""
    kind = n >> 5 & 3
    return ("Ack", "RNR Nak", "Reserved", "Nak")[kind]


def _ipv4_tail(v: str) -> str:
    """A GID's last four bytes as an IPv4 address: how tshark shows a CM REQ's primary GIDs in a frame
    carried over IPv4 (its `*_ipv4` items)."""
    return str(ipaddress.IPv4Address(ipaddress.IPv6Address(v).packed[12:]))


def _set_flags(key: str, v: str) -> str:
    """A bitmask's value and the labels of its flags that are set (`0x002c, C2, C3, C5`), as Wireshark's
    proto_tree_add_bitmask appends them."""
    n = int(v, 0)
    return ", ".join(
        [v]
        + [spec[0] for k, spec in FIELDS.items() if k.startswith(key + ".") and spec[1] == "FT_BOOLEAN" and n & spec[3]]
    )


def _oui(n: int) -> str:
    """A BASE_OUI value: the OUI, its organisation in brackets (manuf.py); tshark 4.0 cuts the text at 31
    characters."""
    text, name = ":".join(f"{b:02x}" for b in n.to_bytes(3, "big")), vendor(n)
    return f"{text} ({name})"[:31] if name else text


def _bytes_len(v: str) -> int:
    return len(v.replace(":", "")) // 2


OID_ROOTS = {"0": "itu-t", "1": "iso", "2": "joint-iso-itu-t"}  # X.660's top arcs


def _oid_named(v: str) -> str:
    """An OID and its name as Wireshark resolves it without MIBs: the first arc only."""
    first, _, rest = v.partition(".")
    return f"{v} ({OID_ROOTS.get(first, first)}{'.' + rest if rest else ''})"


# Lines dissectors word themselves (not "Label: value"): key -> the text after the label's colon.
WORDED = {
    "ip.hdr_len": lambda v: f"{v} bytes ({int(v) // 4})",
    "ip.dsfield": _ds,
    "ipv6.tclass": _ds,
    "ip.flags": _ip_flags,
    "ip.frag_offset": lambda v: str(int(v) * 8),  # held in 8-byte units, shown in bytes (packet-ip.c)
    "ip.checksum": lambda v: f"{v} [validation disabled]",
    "udp.checksum": lambda v: f"{v} [zero-value ignored]" if int(v, 0) == 0 else f"{v} [unverified]",
    "erf.types": lambda v: (
        f"{v} (Type {int(v, 0) & 0x7F}: {VALUES['erf.types.type'].get(int(v, 0) & 0x7F, 'Unknown')})"
    ),
    "erf.flags": lambda v: f"{v} (Capture Interface: {int(v, 0) & 3})",
    IB + "aeth.syndrome": lambda v: f"{v}, {_syndrome(int(v))}",
    "ip.checksum.status": lambda v: "Unverified" if v == "2" else v,
    "udp.checksum.status": lambda v: {"2": "Unverified", "3": "Not present"}.get(v, v),
    "macc.cbfc.enbv": lambda v: _set_flags("macc.cbfc.enbv", v),
    # IEEE 802.1Qaz D.2.8: a maximum of 0 traffic classes stands for 8
    "lldp.dcbx.ieee.ets.maxtcs": lambda v: f"{int(v) or 8} (0x{int(v):x})",
    "lldp.mgn.obj.id": _oid_named,
    **nvme_words.WORDED,
    **nvme_data_words.WORDED,
    **smb_words.WORDED,
    **iser_words.WORDED,
}
WHOLE = {  # items shown with a text of their own
    "frame.len": lambda v: f"Frame Length: {v} bytes ({int(v) * 8} bits)",
    "frame.cap_len": lambda v: f"Capture Length: {v} bytes ({int(v) * 8} bits)",
    "udp.payload": lambda v: f"UDP payload ({_bytes_len(v)} bytes)",
    "Timestamps": lambda v: "[Timestamps]",
    "udp.time_relative": lambda v: f"[Time since first frame: {v} seconds]",
    "udp.time_delta": lambda v: f"[Time since previous frame: {v} seconds]",
    "data.len": lambda v: f"[Length: {v}]",
    IB + "bth.analysis": lambda v: "[RC analysis]",  # ibwire's, placed as tshark places [SEQ/ACK analysis]
    **rpc_words.WHOLE,
    **nvme_data_words.WHOLE,
    **smb_words.WHOLE,
    **iser_words.WHOLE,
}


# Headers and MAD parts as packet-infiniband.c titles them (`{summary}`: the MAD's method(attribute),
# `{attribute}`: its attribute's name).
CONTAINERS = {
    IB + k: v
    for k, v in {
        "lrh": "Local Route Header",
        "grh": "Global Route Header",
        "bth": "Base Transport Header",
        "rdeth": "RDETH - Reliable Datagram Extended Transport Header",
        "deth": "DETH - Datagram Extended Transport Header",
        "reth": "RETH - RDMA Extended Transport Header",
        "atomiceth": "AtomicETH - Atomic Extended Transport Header",
        "aeth": "AETH - ACK Extended Transport Header",
        "atomicacketh": "ATOMICACKETH - Atomic ACK Extended Transport Header",
        "immdt": "IMMDT - Immediate Data Extended Transport Header",
        "ieth": "IETH - Invalidate Extended Transport Header",
        "mad": "MAD Header - Common Management Datagram",
        "smpdirected": "SMP (Directed Route) {summary}",
        "smplid": "SMP (LID Routed) {summary}",
        "sa.drdlid": "SA {summary}",
        "smplid.smpdata": "{smpdata}",
        "p_keytable.p_keytableblock": "P_KeyTable",
        "cm.req.serviceid": "IP CM ServiceID",
        "cm.req.ip_cm": "IP CM Private Data",
        "payload": "IBA Payload - appears to be EtherType encapsulated",
        "vendor": "Vendor Specific or Unknown Header Sequence",
    }.items()
}
# Titles of an attribute container nested in one of its own name, by nesting level (1, 2)
INNER = {IB + "smplid.smpdata": ("{attribute}",), IB + "sa.drdlid": ("Attribute ({attribute})", "{attribute}")}
NOTICE = IB + "smplid.smpdata"  # the key of a Notice's container and of its trap's (tshark_doc.NOTICE)
NUMBER = IB + "notice.trapnumberdeviceid"


def _notice_title(key: str, items: list, i: int, subtree: bool) -> str:
    """How packet-infiniband.c titles a Notice's container (its trap's description) and its trap's (`Trap 257
    DataDetails`, a trap it does not know: `Vendor Specific Subnet Management Trap`); "" for other items."""
    if key != NOTICE:
        return ""
    inside = dict(items[i + 1][1]) if subtree else {}
    if NUMBER in inside:
        return trap_title(int(inside[NUMBER], 0))
    number = dict(x for x in items if not isinstance(x[1], list)).get(NUMBER)
    if number is None:
        return ""
    return f"Trap {int(number, 0)} DataDetails" if subtree else "Vendor Specific Subnet Management Trap"


# The RMPP header's title by its RMPPType (packet-infiniband.c's RMPP_Packet_Types, tshark 4.0's wording)
RMPP_TYPES = {0: " Not an RMPP Packet ", 1: "RMPP (DATA)", 2: "RMPP (ACK)", 3: "RMPP (STOP)", 4: "RMPP (ABORT)"}


_NO_CHANGE = "No State Change"
_WIDTHS = ("1x", "4x", "8x", "12x")
_SPEEDS = {1: "2.5 Gbps", 3: "2.5 or 5.0 Gbps", 5: "2.5 or 10.0 Gbps", 7: "2.5 or 5.0 or 10.0 Gbps"}
_MTUS = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
_VLS = {1: "VL0", 2: "VL0, VL1", 3: "VL0 - VL3", 4: "VL0 - VL7", 5: "VL0 - VL14"}


def _widths(n: int) -> str:
    return " or ".join(w for i, w in enumerate(_WIDTHS) if n >> i & 1)


# PortInfo fields packet-infiniband.c follows with a name of their value (", Active"; IBA §14.2.5.6), and the
# text it writes for values it does not name (LinkSpeedSupported borrows LinkWidthSupported's).
NAMED = {
    IB + "portinfo." + k: v
    for k, v in {
        "diagcode": (
            {
                0: "Function Ready",
                1: "Performing Self Test",
                2: "Initializing",
                3: "Soft Error - Function has non-fatal error",
                4: "Hard Error - Function has fatal error",
            },
            "DiagCode!",
        ),
        "linkwidthenabled": (
            {
                0: _NO_CHANGE,
                **{n: _widths(n) for n in range(1, 15)},
                255: "Set to LinkWidthSupported Value - Response contains actual LinkWidthSupported",
            },
            "LinkWidthEnabled Value!",
        ),
        "linkwidthsupported": ({n: _widths(n) for n in (1, 3, 7, 11, 15)}, "LinkWidthSupported Value!"),
        "linkwidthactive": ({n: _widths(n) for n in (1, 2, 4, 8)}, "LinkWidthActive Value!"),
        "linkspeedsupported": (_SPEEDS, "LinkWidthSupported Value!"),
        "portstate": (
            {0: _NO_CHANGE, 1: "Down (includes failed links)", 2: "Initialized", 3: "Armed", 4: "Active"},
            "PortState Value!",
        ),
        "portphysicalstate": (
            {
                0: _NO_CHANGE,
                1: "Sleep",
                2: "Polling",
                3: "Disabled",
                4: "PortConfigurationTraining",
                5: "LinkUp",
                6: "LinkErrorRecovery",
                7: "Phy Test",
            },
            "PortPhysicalState Value!",
        ),
        "linkdowndefaultstate": ({0: _NO_CHANGE, 1: "Sleep", 2: "Polling"}, "LinkDownDefaultState Value!"),
        "linkspeedactive": ({1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps"}, "LinkSpeedActive Value!"),
        "linkspeedenabled": (
            {
                0: _NO_CHANGE,
                **_SPEEDS,
                15: "Set to LinkSpeedSupported value - response contains actual LinkSpeedSupported",
            },
            "LinkSpeedEnabled Value!",
        ),
        "neighbormtu": (_MTUS, "NeighborMTU Value!"),
        "vlcap": (_VLS, "VLCap Value!"),
        "mtucap": (_MTUS, "MTUCap Value!"),
        "operationalvls": ({0: _NO_CHANGE, **_VLS}, "OperationalVLs Value!"),
    }.items()
}


def _bits(value: int, mask: int, width: int) -> str:
    """Wireshark's picture of `value` under `mask` in a field `width` bits wide."""
    shift = (mask & -mask).bit_length() - 1
    placed = value << shift
    chars = [
        "." if not mask >> (width - 1 - i) & 1 else "1" if placed >> (width - 1 - i) & 1 else "0" for i in range(width)
    ]
    return " ".join("".join(chars[i : i + 4]) for i in range(0, width, 4))


def _number(n: int, base: str, digits: int) -> str:
    hexa = f"0x{n & ((1 << (4 * digits)) - 1) if n < 0 else n:0{digits}x}"
    if base == "BASE_HEX":
        return hexa
    if base == "BASE_DEC_HEX":
        return f"{n} ({hexa})"
    if base == "BASE_HEX_DEC":
        return f"{hexa} ({n})"
    return str(n)


def _bytes_shown(v: str) -> str:
    raw = v.replace(":", "")
    return raw[:72] + "…" if len(raw) > 72 else raw or "<MISSING>"


def field_line(key: str, value) -> str:
    """One item as Wireshark labels it (`.1.. .... = MigReq: True`, `Opcode: … (4)`); a line depends on the key
    and the value alone, so each (key, value, type) is worded once."""
    try:
        return _field_line_once(key, value)
    except TypeError:  # a value that cannot be a key
        return _field_line(key, value)


@lru_cache(maxsize=1 << 16, typed=True)
def _field_line_once(key: str, value) -> str:
    return _field_line(key, value)


def _field_line(key: str, value) -> str:
    if key in WHOLE:
        return WHOLE[key](value)
    spec = FIELDS.get(key)
    if spec is None:  # a text item (its key is its text), or ibwire's own field as tshark shows an item it works out
        key = key[len(IB) :] if key.startswith(IB) else key
        return own_line(key, value) if value != "" else key
    label, ftype, base, mask = spec
    if ftype in ("FT_NONE", "FT_PROTOCOL"):
        return label
    width = WIDTHS.get(ftype) or (int(base) if ftype == "FT_BOOLEAN" and base.isdigit() else 0)
    if key in DRAWN:
        mask, width = DRAWN[key]
    if key in WORDED:
        text = WORDED[key](value)
    elif ftype == "FT_BOOLEAN":
        on = value is True or value in ("1", "True", "true")
        text = TFS[key][0 if on else 1] if key in TFS else ("True" if on else "False")
    elif ftype in WIDTHS and isinstance(value, str):
        n = int(value, 0)
        bitwidth = (mask >> ((mask & -mask).bit_length() - 1)).bit_length() if mask else WIDTHS[ftype]
        digits = (bitwidth + 3) // 4
        if base == "BASE_OUI":
            text = _oui(n)
        elif key in VALUES:
            name = VALUES[key].get(n, "Unknown")
            text = f"{name} ({_number(n, 'BASE_HEX' if base in ('BASE_HEX', 'BASE_HEX_DEC') else 'BASE_DEC', digits)})"
        else:
            text = _number(n, base, digits)
        value = n
    elif ftype == "FT_BYTES":
        text = _bytes_shown(value)
    elif ftype == "FT_RELATIVE_TIME" or key in SECONDS:
        text = f"{value} seconds"
    else:
        text = str(value)
    line = f"{label}: {text}"
    if mask and width:
        raw = int(value) if isinstance(value, (int, bool)) else int(value, 0) if value[:1].isdigit() else None
        if raw is not None:
            line = f"{_bits(raw // 4 if key == 'ip.hdr_len' else raw, mask, width)} = {line}"
    return f"[{line}]" if key in GENERATED else line


def _heading(name: str, items: list, frame: dict) -> str:
    get = {k: v for k, v in items if not isinstance(v, list)}
    if name == "frame":
        n, wire, cap = get.get("frame.number"), int(get.get("frame.len", 0)), int(get.get("frame.cap_len", 0))
        text = f"Frame {n}: {wire} bytes on wire ({wire * 8} bits), {cap} bytes captured ({cap * 8} bits)"
        sub = dict(next((v for k, v in items if k == "frame.interface_id_tree"), []))
        if sub:
            text += f" on interface {sub['frame.interface_name']}, id {get['frame.interface_id']}"
        return text
    if name == "eth":
        return f"Ethernet II, Src: {get.get('eth.src')}, Dst: {get.get('eth.dst')}"
    if name == "vlan":
        return f"802.1Q Virtual LAN, PRI: {get.get('vlan.priority')}, DEI: {int(get.get('vlan.dei', 0))}, ID: {get.get('vlan.id')}"
    if name in ("ip", "ipv6"):
        return f"Internet Protocol Version {4 if name == 'ip' else 6}, Src: {get.get(name + '.src')}, Dst: {get.get(name + '.dst')}"
    if name == "udp":
        return f"User Datagram Protocol, Src Port: {get.get('udp.srcport')}, Dst Port: {get.get('udp.dstport')}"
    if name == "data":
        return f"Data ({get.get('data.len')} bytes)"
    if name == "arp" and get.get("arp.opcode") in ("1", "2"):  # packet-arp.c: the operation, in brackets
        return f"Address Resolution Protocol ({'request' if get['arp.opcode'] == '1' else 'reply'})"
    if name in TITLED:
        return TITLED[name](items)
    return NAMES.get(name, name)


def layer_label(name: str, items: list) -> str:
    """What tshark's -T fields prints for the protocol `name` of a frame (`-e eth`): its title where the
    dissector worded one (`Ethernet II, Src: …`), else the protocol's filter name (`infiniband`)."""
    title = _heading(name, items, {})
    return name if title == NAMES.get(name) else title


# Protocols' titles where they are the protocol's name alone
NAMES = {
    "infiniband": "InfiniBand",
    "icmp": "Internet Control Message Protocol",
    "icmpv6": "Internet Control Message Protocol v6",
    "erf": "Extensible Record Format",
    "lldp": "Link Layer Discovery Protocol",
    "macc": "MAC Control",
    "nvme-rdma": "NVM Express Fabrics RDMA",
    "rpcordma": "RPC over RDMA",
    "rpcordma.fragments": "[Reassembled RPCoRDMA fragments]",
    "smb_direct": "SMB-Direct (SMB RDMA Transport)",
    "smb_direct.fragments": "[Reassembled SMB Direct Fragments]",
    "smb2": "SMB2 (Server Message Block Protocol version 2)",
    "rpc": "Remote Procedure Call",
    "nfs": "Network File System",
    "iser": "iSCSI Extensions for RDMA",
    "nvme": "NVM Express",
    "_ws.malformed": "[Malformed Packet: InfiniBand]",
}
# Protocols whose title the dissector words from the message
TITLED = {
    "iscsi": iser_words.heading,
    "scsi": iser_words.scsi_heading,
    "nvme": nvme_words.heading,
    "rpc": lambda items: rpc_words.heading("rpc", items),
    "tcp": tcp_doc.heading,
    "nfs": lambda items: rpc_words.heading("nfs", items),
}


MAX_INDENT = 160  # tshark's text output indents no deeper (print.c), however deep the tree


def _items(items: list, depth: int, out: list, layer: str, names: dict, inner: int = 0) -> None:
    """`inner`: how deep these items are nested in containers of the INNER kind."""
    pad = " " * min(4 * depth, MAX_INDENT)
    for i, (key, value) in enumerate(items):
        if key.endswith("_tree") and isinstance(value, list):
            _items(value, depth + 1, out, layer, names, inner + 1 if key[:-5] in INNER else 0)
            continue
        if isinstance(value, nvme_data_words.Titled):  # an entry titled by its number (PSD3, DLE0)
            out.append(pad + value.title.format(shown=_bytes_shown(value)))
            continue
        subtree = i + 1 < len(items) and items[i + 1][0] == key + "_tree"
        if key == IB + "rmpp" and subtree:
            kind = int(dict(items[i + 1][1]).get(IB + "rmpp.rmpptype", "0"), 16)
            out.append(pad + RMPP_TYPES.get(kind, f"Reserved RMPP Type! (0x{kind:02x})"))
            continue
        notice = _notice_title(key, items, i, subtree)
        if notice:
            out.append(pad + notice)
            continue
        if key in CONTAINERS and subtree:
            title = INNER[key][min(inner, len(INNER[key])) - 1] if inner and key in INNER else CONTAINERS[key]
            out.append(pad + title.format(**names))
            continue
        if key in HIDDEN or f"{key}@{layer}" in HIDDEN:
            continue
        if key == "frame.interface_id":
            sub = dict(items[i + 1][1]) if i + 1 < len(items) else {}
            out.append(f"{pad}Interface id: {value} ({sub.get('frame.interface_name', '')})")
            continue
        if key == "data" and isinstance(value, list):  # Data inside its protocol (ICMP's): title, dump, items
            out += [pad + _heading(key, value, {}), DUMP_MARK + dict(value).get("data.data", "").replace(":", "")]
            _items(value, depth + 1, out, key, names)
            continue
        if isinstance(value, list):  # a text item (Timestamps, an NVMe-oF Cmd or Cqe) and what it holds
            text = nvme_words.title(key, value) or smb_words.title(key, value) or tcp_doc.title(key, value)
            text = text or icmp_doc.title(key, value)
            out.append(pad + (text or field_line(key, "")))
            _items(value, depth + 1, out, layer, names)
            continue
        if key in (IB + "cm.req.prim_localgid", IB + "cm.req.prim_remotegid") and names["over_ipv4"]:
            value = _ipv4_tail(value)
        line = field_line(key, value)
        if key.startswith(("rpc", "nfs")):  # named by the RPC call the frame carries or answers
            line = rpc_words.line(key, value, line, layer, names["rpc"])
        if key.startswith("smb"):
            line = smb_words.line(key, value, line)
        if key == "nvme.cmd.opc":  # named by the queue: admin (0) or I/O
            line = f"Opcode: {nvme_words.opcode(value, names['nvme_admin'])}"
        if key in NAMED:
            names_of, other = NAMED[key]
            line += ", " + names_of.get(int(value, 0), f"Reserved {other} Possible Error")
        if key in INDEXED:  # P_KeyTable entries: tshark appends the entry's number
            line += f"({names.setdefault(key, 0) + INDEXED[key]})"
            names[key] += 1
        out.append(pad + line)


# The protocol whose dissector stopped (tshark's short name), by the layer before tshark 4.4's Malformed Packet
MALFORMED_IN = {"nvme": "NVMe Fabrics RDMA"}


def _malformed(before: str) -> list:
    """tshark's -V lines of a Malformed Packet (an exception in the dissector of the layer `before`)."""
    return [
        f"[Malformed Packet: {MALFORMED_IN.get(before, 'InfiniBand')}]",
        "    [Expert Info (Error/Malformed): Malformed Packet (Exception occurred)]",
        "        [Malformed Packet (Exception occurred)]",
        "        [Severity level: Error]",
        "        [Group: Malformed]",
    ]


# Items tshark numbers, as packet-infiniband.c does (P_KeyBase one ahead of its MembershipType).
INDEXED = {IB + "p_keytable.membershiptype": 0, IB + "p_keytable.p_keybase": 1}


def tree_text(layers: list, flat: dict, extra: dict = None) -> str:
    """One frame's -V text from its tshark-shaped document (ibwire.report.packets.tshark_doc.document) and its
    decoded fields (`flat`, for the MAD's title); `extra`: ibwire's own fields, shown after the layers."""
    summary = str(flat.get("mad.summary", ""))
    cm = summary.startswith("CM: ")  # madnames.summary: "CM: ConnectRequest", else "Method(Attribute)"
    attribute = summary[4:] if cm else summary.partition("(")[2].rstrip(")")
    names = {
        "summary": summary,
        "attribute": attribute,
        "smpdata": f"CM {attribute}" if cm else f"Attribute ({attribute})",
        "over_ipv4": any(name == "ip" for name, _ in layers),
        "nvme_admin": not flat.get("nvme-rdma.cmd.qid"),
        "rpc": tuple(flat.get(f"rpc{k}") for k in (".program", ".programversion", ".msgtyp", "ordma.version")),
    }
    out, before = [], ""
    for name, items in layers:
        if name == "_ws.malformed" and any(k == "_ws.expert" and "_ws.malformed.expert" in dict(v) for k, v in items):
            out += _malformed(before)
            continue
        out.append(_heading(name, items, {}))
        if name == "data":  # where tshark -V dumps its bytes (print.c): native/dump.c writes them
            out.append(DUMP_MARK + dict(items).get("data.data", "").replace(":", ""))
        _items(items, 1, out, name, names)
        before = name
    if extra:
        out.append("ibwire")
        out += ["    " + own_line(key, value) for key, value in extra.items()]
    return "\n".join(line if line[:1] == DUMP_MARK else printable(line, octal=True) for line in out) + "\n"


def hex_dump(data: bytes) -> str:
    """tshark -x: offset, 16 bytes in hex, their printable ASCII; a blank line after."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off : off + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:04x}  {' '.join(f'{b:02x}' for b in chunk):<47}   {text}")
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=None)
def _value_names() -> dict:
    """Field -> {number: name} for the numbers ibwire names and tshark 4.0's tree leaves bare."""
    from dissectors.mad import table as T

    widths = {k: v.upper() for k, v in T.LINK_WIDTHS.items()}
    return {
        "mad.mgmtclass": {k: v[1] for k, v in T.CLASSES.items()},
        "mad.method": T.METHODS,
        "portinfo.portstate": T.PORT_STATES,
        "nodeinfo.nodetype": T.NODE_TYPES,
        "sminfo.smstate": T.SM_STATES,
        "rmpp.rmpptype": T.RMPP_TYPES,
        **{f"portinfo.linkwidth{w}": widths for w in ("active", "enabled", "supported")},
        **{f"portinfo.linkspeed{w}": T.LINK_SPEEDS for w in ("active", "enabled", "supported")},
    }


def _named(key: str, value, flat: dict):
    """`Name (number)` of a numbered field ibwire names, else None."""
    if isinstance(value, list):
        shown = [_named(key, v, flat) for v in value]
        return ", ".join(shown) if all(shown) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if key == "mad.attributeid":
        from dissectors.mad.table import attribute

        name = attribute(flat.get("mad.mgmtclass", -1), value)[0]
    else:
        name = _value_names().get(key, {}).get(value)
    return f"{name} ({f'0x{value:x}' if value > 9 else value})" if name else None


def own_fields(flat: dict, layers: list) -> dict:
    """ibwire's fields of a frame that its tshark-shaped layers do not hold (CRC verdicts, names of the
    numbers tshark shows bare, …); payload and padding bytes are in tshark's Data and trailer lines."""
    from ibwire.report.packets.tshark_doc import leaves

    held = set()
    for _, items in layers:
        for k, _v in leaves(items, []):
            held.add(k[len(IB) :] if k.startswith(IB) else k)
    out, names = {}, _value_names()
    for k, v in flat.items():
        named = _named(k, v, flat) if k in names or k == "mad.attributeid" else None
        if named:
            out[k] = named
        elif (
            k not in held
            and "." in k
            and not k.startswith(("frame.", "_", "payload.", "padding."))
            and isinstance(v, (int, str, float))
        ):
            out[k] = f"{v:.9f}" if isinstance(v, float) else v  # a pause in seconds, to the nanosecond
    return out


def tree(decoded) -> str:
    """One decoded frame's -V tree on its own (no capture around it: times and UDP streams start at it)."""
    from ibwire.report.packets.tshark_doc import Session, Times, document

    ns = round(decoded.frame.time * 1e9)
    layers = document(decoded, Times(ns, 0, 0, 0), Session())
    return bytes(Dumps()(tree_text(layers, decoded.flat, own_fields(decoded.flat, layers)).encode())).decode()
