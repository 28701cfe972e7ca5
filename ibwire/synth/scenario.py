"""Scenario files (TOML): fabric, partitions, queue pairs, operations, faults and declared ground truth.

`load(path)` returns a `Scenario`; every mistake becomes a `UserError` naming the file and line.  The file
format is documented in captures/README.md.
"""

import ipaddress
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from dissectors.numbers import DEFAULT_PKEY
from ibwire.errors import InputError
from ibwire.files.inputfile import key_line, not_a_key, parse_toml, read_text, type_name

QP_TYPES = ("RC", "UC", "UD", "XRC")
OP_KINDS = ("send", "send_imm", "send_inv", "write", "write_imm", "read", "cmp_swap", "fetch_add")
FAULT_KINDS = (
    "drop",
    "capture_gap",
    "rnr",
    "ecn",
    "bad_icrc",
    "bad_vcrc",
    "smp_set",
    "rogue_sm",
    "pkey_drift",
    "bad_qkey",
    "ipoib_join",
)
PMTUS = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


@dataclass
class Port:
    name: str
    guid: int
    lid: int
    kind: str = "ca"  # ca, switch, sm (a CA port running the SM)
    host: str = ""
    pf: str = ""
    vf: Optional[int] = None
    mac: bytes = b""
    ip4: bytes = b""
    ip6: bytes = b""
    vlan: Optional[int] = None
    pcp: int = 3
    gid: bytes = b""
    pkeys: Optional[List[int]] = None  # programmed P_Key table when it differs from the policy
    enforce: bool = True  # P_Key enforcement on receive
    ipoib_qpn: int = 0
    mkey: int = 0  # M_Key the SM programs (protect bits 1); 0: no M_Key protection


@dataclass
class Partition:
    name: str
    pkey: int  # 15-bit base
    full: List[str]
    limited: List[str]
    ipoib: bool = True
    mlid: int = 0xC000

    @property
    def mgid(self) -> bytes:
        """IPoIB IPv4 broadcast group: ff12:401b:<P_Key with full bit>::ffff:ffff (RFC 4391 §4)."""
        return bytes.fromhex(f"ff12401b{self.pkey | 0x8000:04x}000000000000ffffffff")


@dataclass
class QP:
    name: str
    type: str
    src: str
    dst: str
    src_qpn: int
    dst_qpn: int
    pkey: int
    psn: int = 0
    pmtu: int = 1024
    cm: bool = True
    path_query: bool = True
    ack_every: int = 1
    credits: int = 16
    qkey: int = 0x11111111
    xrc_srq: int = 0
    retry_cnt: int = 7
    timeout_us: float = 4000.0
    line: int = 0
    rate_cut: float = 0.0  # DCQCN reaction: the fraction of its rate the sender gives up per CNP
    recover_us: float = 100.0  # after this long without a CNP the sender is back at line rate
    cnp: bool = True  # the receiver answers ECN-CE marks with CNPs
    udp_sport: Optional[int] = None  # RoCEv2 UDP source port of the requester (default: from its QPN)
    rnr_retry: int = 7  # RNR NAKs in a row the requester takes before it gives up; 7: never (IBA §9.7.5.2.8)


@dataclass
class Op:
    qp: str
    kind: str
    size: int
    count: int
    at: float
    interval: float


@dataclass
class Fault:
    kind: str
    args: dict
    line: int


@dataclass
class Ping:
    src: str
    dst: str
    partition: str
    at: float
    count: int


@dataclass
class Scenario:
    path: Path
    name: str
    description: str
    link: str
    seed: int
    start: float
    latency: float  # one-way seconds
    rate_bps: float
    cnp_interval: float
    ack_delay: float
    ports: Dict[str, Port]
    partitions: Dict[str, Partition]
    qps: Dict[str, QP]
    ops: List[Op]
    faults: List[Fault]
    pings: List[Ping]
    sm: Optional[str]
    sweep: bool
    expect: dict = field(default_factory=dict)
    dscp: int = 0  # DSCP of RoCE data and ACKs
    cnp_dscp: int = 48  # DSCP of CNPs
    pfc: List[dict] = field(default_factory=list)  # [[pfc]]: pause frames a port sends
    lldp: List[dict] = field(default_factory=list)  # [[lldp]]: LLDP DCBX frames a port sends
    nfs: List[dict] = field(default_factory=list)  # [[nfs]]: NFS-over-RDMA connections (ibwire.synth.nfs)
    smb: List[dict] = field(default_factory=list)  # [[smb]]: SMB Direct connections (ibwire.synth.smb)
    iser: List[dict] = field(default_factory=list)  # [[iser]]: iSER sessions (ibwire.synth.iser)
    nvme: List[dict] = field(default_factory=list)  # [[nvme]]: NVMe-oF I/O queues (ibwire.synth.nvme)

    def policy_pkeys(self, port: str) -> List[int]:
        """P_Keys the policy gives a port: base | 0x8000 for full members, base for limited ones."""
        keys = []
        for p in self.partitions.values():
            if port in p.full or "ALL" in p.full:
                keys.append(p.pkey | 0x8000)
            elif port in p.limited or "ALL" in p.limited:
                keys.append(p.pkey)
        return keys

    def port_pkeys(self, port: str) -> List[int]:
        p = self.ports[port]
        if p.pkeys is not None:
            return list(p.pkeys)
        return self.policy_pkeys(port) if self.partitions else [DEFAULT_PKEY]


class _Src:
    """The scenario text, to point errors at a line."""

    def __init__(self, path: Path, text: str):
        self.path, self.text, self.lines = path, text, text.splitlines()

    def line_of(self, table: str, index: int, key: str = "") -> int:
        """Line of `key` inside the index-th `[[table]]` (or of the table header itself)."""
        seen = -1
        start = 0
        for i, ln in enumerate(self.lines):
            if re.match(rf"\s*\[\[\s*{re.escape(table)}\s*\]\]", ln) or (
                index < 0 and re.match(rf"\s*\[\s*{re.escape(table)}\s*\]", ln)
            ):
                seen += 1
                if seen == index or index < 0:
                    start = i
                    break
        else:
            return 0
        if key:
            for j in range(start + 1, len(self.lines)):
                if re.match(r"\s*\[", self.lines[j]):
                    break
                if re.match(rf"\s*{re.escape(key)}\s*=", self.lines[j]):
                    return j + 1
        return start + 1

    def fail(self, line: int, msg: str):
        raise InputError(self.path, line, msg)


def _int(v, what, src, line):
    if isinstance(v, bool):
        src.fail(line, f"{what} must be a number, not {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            pass
    src.fail(line, f"{what} must be an integer (decimal or 0x hex), not {v!r}")


MAX_PACKETS = 1 << 40
_FAULT_NUMBERS = (
    ("packet", 1, MAX_PACKETS),
    ("message", 1, MAX_PACKETS),
    ("first", 1, MAX_PACKETS),
    ("last", 1, MAX_PACKETS),
    ("timer", 0, 31),
    ("times", 1, 1 << 16),
    ("mkey", 0, (1 << 64) - 1),
)  # RNR timer: 5 bits
LAST_SECOND = 0xFFFFFFFF  # pcap and ERF record times carry 32-bit seconds (the year 2106)
MAX_COUNT = 1_000_000  # messages per [[op]] or pings per [[ipoib]]: a scenario file cannot ask for more


def _ranged(v, what, lo, hi, src, line):
    """An integer in lo..hi (the field's width on the wire), or an error at its line."""
    n = _int(v, what, src, line)
    if not lo <= n <= hi:
        bound = (lambda x: f"{x:#x}") if hi & (hi + 1) == 0 else str  # a field width: hex; a count: decimal
        src.fail(line, f"{what} {bound(n) if n >= 0 else n} is outside {bound(lo)}..{bound(hi)}")
    return n


def _float(v, what, src, line, hi=math.inf):
    """A time, interval or rate of the scenario: a finite number, never negative (nor above `hi`)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        src.fail(line, f"{what} must be a number, not {v!r}")
    if not math.isfinite(v) or v < 0 or v > hi:
        src.fail(line, f"{what} {v} is outside 0..{hi} (a time, interval or rate is a finite number, not negative)")
    return float(v)


def _list(v, what, src, line):
    if not isinstance(v, list):
        src.fail(line, f'{what} must be a list such as ["a", "b"], not {v!r}')
    return v


def _mac(v, src, line):
    try:
        b = bytes.fromhex(v.replace(":", "").replace("-", ""))
    except (ValueError, AttributeError):
        b = b""
    if len(b) != 6:
        src.fail(line, f'mac {v!r} is not a MAC address like "02:00:00:00:00:01"')
    return b


def _ip(v, version, src, line):
    try:
        a = ipaddress.ip_address(v)
    except ValueError:
        a = None
    if a is None or a.version != version:
        src.fail(line, f"{v!r} is not an IPv{version} address")
    return a.packed


def load(path, link: Optional[str] = None) -> Scenario:
    path = Path(path)
    text = read_text(path, "scenario", "check the path")
    doc = parse_toml(text, path)
    src = _Src(path, text)
    _shape(doc, src)
    return _build(doc, src, link)


# Every key a scenario table may hold and what its value is (captures/README.md); a [[fault]] holds `kind`
# and the keys of its kind.
INT, NUM, TEXT, FLAG, TEXTS, INTS, TABLE = (
    "an integer (decimal or 0x hex text)",
    "a number",
    "a string",
    "true or false",
    "a list of strings",
    "a list of integers",
    "a table",
)
_PORT = {
    "name": TEXT,
    "guid": INT,
    "lid": INT,
    "kind": TEXT,
    "host": TEXT,
    "pf": TEXT,
    "vf": INT,
    "mac": TEXT,
    "ip": TEXT,
    "ip6": TEXT,
    "vlan": INT,
    "pcp": INT,
    "gid": TEXT,
    "pkeys": INTS,
    "enforce": FLAG,
    "mkey": INT,
}
# The storage protocols' tables: (their two ends, the default op, the smallest size, the protocol's own
# number: key, default, highest); `_build` reads them in this order.
_STORAGE = {
    "nfs": (("client", "server"), "getattr", 1, ("xid", 0x10000, 0xFFFFFFFF)),
    "smb": (("client", "server"), "read", 1, ("message_id", 1, (1 << 63) - 1)),
    "iser": (("initiator", "target"), "read", 512, ("itt", 0x100, 0xFFFF0000)),
    "nvme": (("host", "target"), "read", 512, ("cid", 1, 0xFFFF)),
}


def _storage_keys(a: str, b: str, tag: str) -> dict:
    """The keys of a storage protocol's table whose ends are `a` and `b` and whose own number is `tag`."""
    return {
        a: TEXT,
        b: TEXT,
        f"{a}_qpn": INT,
        f"{b}_qpn": INT,
        "op": TEXT,
        "count": INT,
        "size": INT,
        "at_us": NUM,
        "interval_us": NUM,
        "cm": FLAG,
        "mtu": INT,
        tag: INT,
    }


_TABLES = {  # table -> (an array of tables, its keys)
    "scenario": (
        False,
        {
            "name": TEXT,
            "description": TEXT,
            "link": TEXT,
            "seed": INT,
            "start": NUM,
            "latency_us": NUM,
            "rate_gbps": NUM,
            "cnp_interval_us": NUM,
            "ack_delay_us": NUM,
            "dscp": INT,
            "cnp_dscp": INT,
        },
    ),
    "sm": (False, {"port": TEXT, "sweep": FLAG}),
    "port": (True, _PORT),
    "switch": (True, _PORT),
    "partition": (True, {"name": TEXT, "pkey": INT, "full": TEXTS, "limited": TEXTS, "ipoib": FLAG}),
    "qp": (
        True,
        {
            "name": TEXT,
            "type": TEXT,
            "src": TEXT,
            "dst": TEXT,
            "src_qpn": INT,
            "dst_qpn": INT,
            "pkey": INT,
            "psn": INT,
            "pmtu": INT,
            "cm": FLAG,
            "path_query": FLAG,
            "ack_every": INT,
            "credits": INT,
            "qkey": INT,
            "xrc_srq": INT,
            "retry_cnt": INT,
            "rnr_retry": INT,
            "timeout_us": NUM,
            "rate_cut": NUM,
            "recover_us": NUM,
            "cnp": FLAG,
            "udp_sport": INT,
        },
    ),
    "op": (True, {"qp": TEXT, "kind": TEXT, "size": INT, "count": INT, "at_us": NUM, "interval_us": NUM}),
    "fault": (
        True,
        {
            "kind": TEXT,
            "qp": TEXT,
            "packet": INT,
            "seen": FLAG,
            "message": INT,
            "timer": INT,
            "times": INT,
            "first": INT,
            "last": INT,
            "port": TEXT,
            "target": TEXT,
            "attribute": TEXT,
            "pkeys": INTS,
            "mkey": INT,
            "at_us": NUM,
            "partition": TEXT,
        },
    ),
    "ipoib": (True, {"src": TEXT, "dst": TEXT, "partition": TEXT, "at_us": NUM, "count": INT}),
    "pfc": (
        True,
        {
            "port": TEXT,
            "priority": INT,
            "pause": FLAG,
            "quanta": INT,
            "at_us": NUM,
            "count": INT,
            "interval_us": NUM,
            "xon": FLAG,
        },
    ),
    "lldp": (True, {"port": TEXT, "at_us": NUM, "pfc": INTS, "apps": TEXTS, "willing": FLAG}),
    **{table: (True, _storage_keys(*_STORAGE[table][0], _STORAGE[table][3][0])) for table in _STORAGE},
    "expect": (False, {"flow": TABLE, "count": TABLE, "findings": TABLE, "health": TABLE}),
}
_TABLES["nfs"][1]["version"] = INT  # the RPC-RDMA version [[nfs]] speaks (ibwire.synth.nfs)
_TABLES["nvme"][1]["qid"] = INT  # the I/O queue an [[nvme]] connects (ibwire.synth.nvme)
_FAULT_KEYS = {
    "drop": {"qp", "packet", "seen"},
    "capture_gap": {"qp", "packet"},
    "bad_icrc": {"qp", "packet"},
    "bad_vcrc": {"qp", "packet"},
    "rnr": {"qp", "message", "timer", "times"},
    "ecn": {"qp", "first", "last"},
    "smp_set": {"port", "target", "attribute", "pkeys", "mkey", "at_us"},
    "rogue_sm": {"port", "at_us"},
    "pkey_drift": {"port", "at_us"},
    "bad_qkey": {"qp"},
    "ipoib_join": {"port", "partition", "at_us"},
}
_EXPECT = {
    "flow": {
        "messages",
        "bytes",
        "drops",
        "not_captured",
        "retransmits",
        "timeout_retries",
        "nak_retries",
        "rnr_retries",
        "gave_up_after",
        "naks_psn",
        "rnr",
        "bad_icrc",
    },
    "count": {
        "ecn_marked",
        "cnps",
        "becn",
        "traps_256",
        "traps_257",
        "traps_258",
        "violations",
        "arp",
        "icmp",
        "nodeinfo_get",
        "portinfo_set",
        "pkeytable_set",
        "rpc_calls",
        "rpc_replies",
        "chunk_bytes",
        "smb_requests",
        "smb_responses",
        "rdma_bytes",
        "scsi_commands",
        "scsi_responses",
        "data_bytes",
        "nvme_commands",
        "nvme_completions",
        "nvme_connects",
    },
    "findings": {"rule", "severity", "src", "dst", "port", "pkey", "trap", "evidence", "frames"},
    "health": {"findings", "pause_storms", "ce_unanswered", "cnp_no_rate_cut", "pause_frames", "lldp_frames", "pauses"},
}
_IS = {
    INT: lambda v: isinstance(v, (int, str)) and not isinstance(v, bool),
    NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    TEXT: lambda v: isinstance(v, str),
    FLAG: lambda v: isinstance(v, bool),
    TABLE: lambda v: isinstance(v, (dict, list)),
    TEXTS: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    INTS: lambda v: isinstance(v, list) and all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in v),
}


def _shape(doc: dict, src: "_Src") -> None:
    """Every table, key and value type of the scenario is one the format has, or an error at its line naming
    the closest key: a misspelt key would otherwise be a default silently used."""
    for name, value in doc.items():
        if name not in _TABLES:
            src.fail(
                src.line_of(name, -1) or key_line(src.text, name),
                not_a_key(name, _TABLES, "a scenario") + " (a table name)",
            )
        many, keys = _TABLES[name]
        if many != isinstance(value, list) or not all(isinstance(t, dict) for t in (value if many else [value])):
            src.fail(
                src.line_of(name, -1) or key_line(src.text, name),
                f"{name} must be {'an array of tables [[' + name + ']]' if many else 'a table [' + name + ']'}",
            )
        for i, table in enumerate(value if many else [value]):
            idx = i if many else -1
            kind = table.get("kind") if name == "fault" and isinstance(table.get("kind"), str) else None
            allowed = keys if name != "fault" else {"kind"} | _FAULT_KEYS.get(kind, set(keys))
            for k, v in table.items():
                if k not in allowed:
                    what = f"a {table['kind']} fault" if name == "fault" and k in keys else f"[{name}]"
                    src.fail(src.line_of(name, idx, k), not_a_key(k, allowed, what))
                if not _IS[keys[k]](v):
                    src.fail(src.line_of(name, idx, k), f"{k} must be {keys[k]}, not {type_name(v)} ({v!r:.60})")
    _shape_expect(doc.get("expect", {}), src)


def _shape_expect(expect: dict, src: "_Src") -> None:
    """[expect]: ground truth the tests compare with; its keys are checked as the others."""
    flows, findings = expect.get("flow", {}), expect.get("findings", [])
    if (
        not isinstance(flows, dict)
        or not all(isinstance(t, dict) for t in flows.values())
        or not isinstance(expect.get("count", {}), dict)
        or not isinstance(findings, list)
        or not isinstance(expect.get("health", {}), dict)
        or not all(isinstance(t, dict) for t in findings)
    ):
        src.fail(
            src.line_of("expect", -1),
            "[expect] holds [expect.flow.QP] and [expect.count] tables and [[expect.findings]]",
        )
    tables = [(f"expect.flow.{q}", -1, t, "flow") for q, t in flows.items()]
    tables += [("expect.count", -1, expect.get("count", {}), "count")]
    tables += [("expect.health", -1, expect.get("health", {}), "health")]
    tables += [("expect.findings", i, t, "findings") for i, t in enumerate(findings)]
    for table, idx, body, kind in tables:
        for k in body:
            if k not in _EXPECT[kind]:
                src.fail(src.line_of(table, idx, k), not_a_key(k, _EXPECT[kind], f"[{table}]"))


def _build(doc, src: _Src, link_override) -> Scenario:
    """The Scenario of a document `_shape` has checked, or an error at the line of its first mistake."""
    from ibwire.synth.links import LINKS

    sc = doc.get("scenario", {})
    link = link_override or sc.get("link", "roce2")
    if link not in LINKS:
        src.fail(src.line_of("scenario", -1, "link"), f"link {link!r} is not one of {', '.join(LINKS)}")
    ports = _ports(doc, src)

    def need_port(name, table, idx, key):
        """`name`, a declared port, or an error at the line of `key` in the idx-th [[table]]."""
        if name not in ports:
            src.fail(src.line_of(table, idx, key), f"{key} {name!r} names no declared port (ports: {', '.join(ports)})")
        return name

    scen = _settings(doc, src, link, ports, _partitions(doc, src, need_port), need_port)
    _qps(doc, scen, src, need_port)
    _ops(doc, scen, src)
    _faults(doc, scen, src, need_port)
    _lossless(doc, scen, src, need_port)
    _pings(doc, scen, src, need_port)
    for table in _STORAGE:
        _storage(doc, scen, src, need_port, table)
    return scen


def _ports(doc, src: _Src) -> Dict[str, Port]:
    """[[port]] and [[switch]] tables, by name; at least one."""
    ports: Dict[str, Port] = {}
    for i, p in enumerate(doc.get("port", []) + [dict(s, kind="switch") for s in doc.get("switch", [])]):
        table = "port" if i < len(doc.get("port", [])) else "switch"
        idx = i if table == "port" else i - len(doc.get("port", []))
        port = _port(p, table, idx, ports, src)
        ports[port.name] = port
    if not ports:
        src.fail(0, "the scenario declares no [[port]]; add at least two ports")
    return ports


def _port(p: dict, table: str, idx: int, ports: Dict[str, Port], src: _Src) -> Port:
    """The idx-th [[port]] or [[switch]]: a name and GUID no port before it has, a unicast LID, addresses
    derived from GUID and LID unless given."""
    ln = lambda k="": src.line_of(table, idx, k)  # noqa: E731
    for req in ("name", "guid", "lid"):
        if req not in p:
            src.fail(ln(), f"[[{table}]] number {idx + 1} needs a {req!r}")
    name = p["name"]
    if name in ports:
        src.fail(ln("name"), f"port name {name!r} is used twice; names must be unique")
    guid = _ranged(p["guid"], "guid", 1, (1 << 64) - 1, src, ln("guid"))
    lid = _int(p["lid"], "lid", src, ln("lid"))
    if not 0 < lid < 0xC000:
        src.fail(
            ln("lid"),
            f"lid {lid:#x} is not a unicast LID (1..0xbfff)"
            if lid > 0
            else f"lid {lid} is not a unicast LID (1..0xbfff)",
        )
    twin = next((q.name for q in ports.values() if q.guid == guid), None)
    if twin is not None:
        src.fail(ln("guid"), f"guid {guid:#x} is already port {twin!r}'s; every port has its own GUID")
    mac = _mac(p["mac"], src, ln("mac")) if "mac" in p else bytes([2, 0]) + (guid & 0xFFFFFFFF).to_bytes(4, "big")
    ip4 = _ip(p["ip"], 4, src, ln("ip")) if "ip" in p else bytes([10, 0, lid >> 8, lid & 0xFF])
    ip6 = _ip(p["ip6"], 6, src, ln("ip6")) if "ip6" in p else ipaddress.IPv6Address(f"fd00::{lid:x}").packed
    gid = _ip(p["gid"], 6, src, ln("gid")) if "gid" in p else (0xFE80 << 112 | guid).to_bytes(16, "big")
    vlan = _int(p["vlan"], "vlan", src, ln("vlan")) if "vlan" in p else None
    if vlan is not None and not 0 < vlan < 4095:
        src.fail(ln("vlan"), f"vlan {vlan} is outside 1..4094")
    pkeys = (
        [_ranged(k, "pkey", 0, 0xFFFF, src, ln("pkeys")) for k in _list(p["pkeys"], "pkeys", src, ln("pkeys"))]
        if "pkeys" in p
        else None
    )
    kind = p.get("kind", "ca")
    if kind not in ("ca", "switch"):
        src.fail(ln("kind"), f'kind {kind!r} must be "ca" or "switch"')
    vf = _ranged(p["vf"], "vf", 0, 0xFFFF, src, ln("vf")) if "vf" in p else None
    return Port(
        name,
        guid,
        lid,
        kind,
        p.get("host", ""),
        p.get("pf", ""),
        vf,
        mac,
        ip4,
        ip6,
        vlan,
        _ranged(p.get("pcp", 3), "pcp", 0, 7, src, ln("pcp")),
        gid,
        pkeys,
        bool(p.get("enforce", True)),
        0x48 + len(ports),
        _ranged(p.get("mkey", 0), "mkey", 0, (1 << 64) - 1, src, ln("mkey")),
    )


def _partitions(doc, src: _Src, need_port) -> Dict[str, Partition]:
    """[[partition]] tables, by name: a P_Key base and member ports (or "ALL"); MLIDs from 0xC001 on."""
    parts: Dict[str, Partition] = {}
    for i, p in enumerate(doc.get("partition", [])):
        for req in ("name", "pkey"):
            if req not in p:
                src.fail(src.line_of("partition", i), f"[[partition]] number {i + 1} needs a {req!r}")
        pk = _ranged(p["pkey"], "pkey", 1, 0xFFFF, src, src.line_of("partition", i, "pkey")) & 0x7FFF
        for key in ("full", "limited"):
            _list(p.get(key, []), key, src, src.line_of("partition", i, key))
        for m in p.get("full", []) + p.get("limited", []):
            if m != "ALL":
                need_port(m, "partition", i, "full" if m in p.get("full", []) else "limited")
        parts[p["name"]] = Partition(
            p["name"],
            pk,
            list(p.get("full", [])),
            list(p.get("limited", [])),
            bool(p.get("ipoib", True)),
            0xC000 + i + 1,
        )
    return parts


def _settings(doc, src: _Src, link: str, ports, parts, need_port) -> Scenario:
    """The Scenario of the [scenario] and [sm] tables, with its ports and partitions and no traffic yet."""
    sc = doc.get("scenario", {})
    smd = doc.get("sm", {})
    sm = smd.get("port")
    if sm is not None:
        need_port(sm, "sm", -1, "port")

    def num(k, default, hi=math.inf):
        return _float(sc.get(k, default), k, src, src.line_of("scenario", -1, k), hi)

    if num("rate_gbps", 100.0) == 0:
        src.fail(src.line_of("scenario", -1, "rate_gbps"), "rate_gbps 0 is outside 0..inf (a link carries something)")
    return Scenario(
        src.path,
        sc.get("name", src.path.stem),
        sc.get("description", ""),
        link,
        _int(sc.get("seed", 1), "seed", src, src.line_of("scenario", -1, "seed")),
        num("start", 1700000000.0, LAST_SECOND),
        num("latency_us", 1.0) * 1e-6,
        num("rate_gbps", 100.0) * 1e9,
        num("cnp_interval_us", 50.0) * 1e-6,
        num("ack_delay_us", 4.0) * 1e-6,
        ports,
        parts,
        {},
        [],
        [],
        [],
        sm,
        bool(smd.get("sweep", False)),
        doc.get("expect", {}),
        _ranged(sc.get("dscp", 0), "dscp", 0, 63, src, src.line_of("scenario", -1, "dscp")),
        _ranged(sc.get("cnp_dscp", 48), "cnp_dscp", 0, 63, src, src.line_of("scenario", -1, "cnp_dscp")),
    )


def _qps(doc, scen: Scenario, src: _Src, need_port) -> None:
    """[[qp]] tables into scen.qps; QPNs default to 0x100, 0x101 onwards."""
    for i, q in enumerate(doc.get("qp", [])):
        ln = lambda k="", i=i: src.line_of("qp", i, k)  # noqa: E731
        for req in ("name", "type", "src", "dst"):
            if req not in q:
                src.fail(ln(), f"[[qp]] number {i + 1} needs a {req!r}")
        t = str(q["type"]).upper()
        if t not in QP_TYPES:
            src.fail(ln("type"), f"qp type {q['type']!r} is not one of {', '.join(QP_TYPES)}")
        a, b = need_port(q["src"], "qp", i, "src"), need_port(q["dst"], "qp", i, "dst")
        pkey = _ranged(q["pkey"], "pkey", 1, 0xFFFF, src, ln("pkey")) if "pkey" in q else _shared_pkey(scen, a, b)
        pmtu = _int(q.get("pmtu", 1024), "pmtu", src, ln("pmtu"))
        if pmtu not in PMTUS:
            src.fail(ln("pmtu"), f"pmtu {pmtu} must be one of 256, 512, 1024, 2048, 4096")
        psn = _int(q.get("psn", 0), "psn", src, ln("psn"))
        if not 0 <= psn <= 0xFFFFFF:
            src.fail(ln("psn"), f"psn {psn:#x} does not fit in 24 bits")
        qp = QP(
            q["name"],
            t,
            a,
            b,
            _ranged(q.get("src_qpn", 0x100 + 2 * i), "src_qpn", 0, 0xFFFFFF, src, ln("src_qpn")),
            _ranged(q.get("dst_qpn", 0x101 + 2 * i), "dst_qpn", 0, 0xFFFFFF, src, ln("dst_qpn")),
            pkey,
            psn,
            pmtu,
            bool(q.get("cm", t in ("RC", "UC", "XRC"))),
            bool(q.get("path_query", t != "UD")),
            _ranged(q.get("ack_every", 1), "ack_every", 1, 1 << 24, src, ln("ack_every")),
            _ranged(q.get("credits", 16), "credits", 0, 31, src, ln("credits")),
            _ranged(q.get("qkey", 0x11111111), "qkey", 0, 0xFFFFFFFF, src, ln("qkey")),
            _ranged(q.get("xrc_srq", 0x40), "xrc_srq", 0, 0xFFFFFF, src, ln("xrc_srq")),
            _ranged(q.get("retry_cnt", 7), "retry_cnt", 0, 7, src, ln("retry_cnt")),
            _float(q.get("timeout_us", 4000.0), "timeout_us", src, ln("timeout_us")),
            ln(),
        )
        qp.rate_cut = _float(q.get("rate_cut", 0.0), "rate_cut", src, ln("rate_cut"), 0.99)
        qp.recover_us = _float(q.get("recover_us", 100.0), "recover_us", src, ln("recover_us"))
        qp.cnp = bool(q.get("cnp", True))
        qp.rnr_retry = _ranged(q.get("rnr_retry", 7), "rnr_retry", 0, 7, src, ln("rnr_retry"))
        if "udp_sport" in q:
            qp.udp_sport = _ranged(q["udp_sport"], "udp_sport", 1, 0xFFFF, src, ln("udp_sport"))
        if qp.name in scen.qps:
            src.fail(ln("name"), f"qp name {qp.name!r} is used twice")
        scen.qps[qp.name] = qp


def _shared_pkey(scen: Scenario, a: str, b: str) -> int:
    """The P_Key of a QP that names none: one that ports a and b share (same base, at least one of them a full
    member), a tenant partition's before the default one; the default P_Key if they share none."""
    tb = scen.port_pkeys(b)
    shared = [k for k in scen.port_pkeys(a) if any((x & 0x7FFF) == (k & 0x7FFF) and (x | k) & 0x8000 for x in tb)]
    shared.sort(key=lambda k: (k & 0x7FFF) == 0x7FFF)  # a tenant partition before the default one
    return shared[0] if shared else DEFAULT_PKEY


def _ops(doc, scen: Scenario, src: _Src) -> None:
    """[[op]] tables into scen.ops: kinds the QP's transport supports, sizes a UD QP can send."""
    for i, o in enumerate(doc.get("op", [])):
        ln = lambda k="", i=i: src.line_of("op", i, k)  # noqa: E731
        if o.get("qp") not in scen.qps:
            src.fail(ln("qp"), f"op names qp {o.get('qp')!r}, which no [[qp]] declares")
        kind = o.get("kind", "send")
        if kind not in OP_KINDS:
            src.fail(ln("kind"), f"op kind {kind!r} is not one of {', '.join(OP_KINDS)}")
        qp = scen.qps[o["qp"]]
        size = 8 if kind in ("cmp_swap", "fetch_add") else _int(o.get("size", 64), "size", src, ln("size"))
        if qp.type == "UD" and (kind not in ("send", "send_imm") or size > qp.pmtu):
            src.fail(ln(), f"a UD qp only sends SEND messages of at most its pmtu ({qp.pmtu} bytes)")
        if qp.type == "UC" and kind not in ("send", "send_imm", "write", "write_imm"):
            src.fail(ln("kind"), f"a UC qp cannot do {kind}; UC supports SEND and RDMA WRITE only")
        if not 0 <= size <= 1 << 31:
            src.fail(ln("size"), f"size {size} is out of range")
        count = _ranged(o.get("count", 1), "count", 0, MAX_COUNT, src, ln("count"))
        scen.ops.append(
            Op(
                qp.name,
                kind,
                size,
                count,
                _float(o.get("at_us", 0.0), "at_us", src, ln("at_us")) * 1e-6,
                _float(o.get("interval_us", 10.0), "interval_us", src, ln("interval_us")) * 1e-6,
            )
        )


def _faults(doc, scen: Scenario, src: _Src, need_port) -> None:
    """[[fault]] tables into scen.faults: each with the qp or port it needs and its numbers in range."""
    for i, f in enumerate(doc.get("fault", [])):
        kind = f.get("kind")
        if kind not in FAULT_KINDS:
            src.fail(src.line_of("fault", i, "kind"), f"fault kind {kind!r} is not one of {', '.join(FAULT_KINDS)}")
        if "qp" in f and f["qp"] not in scen.qps:
            src.fail(src.line_of("fault", i, "qp"), f"fault names qp {f['qp']!r}, which no [[qp]] declares")
        for k in ("port", "target"):
            if k in f:
                need_port(f[k], "fault", i, k)
        if kind in ("drop", "capture_gap", "rnr", "ecn", "bad_icrc", "bad_vcrc", "bad_qkey") and "qp" not in f:
            src.fail(src.line_of("fault", i), f"a {kind} fault needs the qp it applies to")
        if kind == "bad_qkey" and scen.qps[f["qp"]].type != "UD":
            src.fail(src.line_of("fault", i, "qp"), "a bad_qkey fault needs a UD qp (only datagrams carry a Q_Key)")
        if kind in ("smp_set", "rogue_sm", "pkey_drift", "ipoib_join") and "port" not in f:
            src.fail(src.line_of("fault", i), f"a {kind} fault needs the port that sends it")
        if kind == "ipoib_join" and f.get("partition") not in scen.partitions:
            src.fail(
                src.line_of("fault", i, "partition"),
                f"ipoib_join names partition {f.get('partition')!r}, which no [[partition]] declares",
            )
        for k in (
            ("packet",)
            if kind in ("drop", "capture_gap", "bad_icrc", "bad_vcrc")
            else ("target",)
            if kind == "smp_set"
            else ()
        ):
            if k not in f:
                src.fail(src.line_of("fault", i), f"a {kind} fault needs {k} = ...")
        if f.get("attribute", "P_KeyTable") not in ("P_KeyTable", "PortInfo"):
            src.fail(
                src.line_of("fault", i, "attribute"), f'attribute {f["attribute"]!r} must be "P_KeyTable" or "PortInfo"'
            )
        f = dict(
            f,
            **{k: _ranged(f[k], k, lo, hi, src, src.line_of("fault", i, k)) for k, lo, hi in _FAULT_NUMBERS if k in f},
        )
        if "pkeys" in f:
            f["pkeys"] = [_ranged(k, "pkey", 0, 0xFFFF, src, src.line_of("fault", i, "pkeys")) for k in f["pkeys"]]
        scen.faults.append(Fault(kind, dict(f), src.line_of("fault", i)))


def _pings(doc, scen: Scenario, src: _Src, need_port) -> None:
    """[[ipoib]] tables into scen.pings: IPoIB ARP and ICMP echo between two ports of a partition."""
    for i, p in enumerate(doc.get("ipoib", [])):
        need_port(p.get("src"), "ipoib", i, "src")
        need_port(p.get("dst"), "ipoib", i, "dst")
        part = p.get("partition", "")
        if part not in scen.partitions:
            src.fail(
                src.line_of("ipoib", i, "partition"), f"ipoib names partition {part!r}, which no [[partition]] declares"
            )
        ln = lambda k="", i=i: src.line_of("ipoib", i, k)  # noqa: E731
        scen.pings.append(
            Ping(
                p["src"],
                p["dst"],
                part,
                _float(p.get("at_us", 0.0), "at_us", src, ln("at_us")) * 1e-6,
                _ranged(p.get("count", 1), "count", 0, MAX_COUNT, src, ln("count")),
            )
        )


def _storage(doc, scen: Scenario, src: _Src, need_port, table: str) -> None:
    """[[nfs]], [[smb]], [[iser]] or [[nvme]] (`table`): connections between two ports, each `count` calls of one kind
    (the OPS of ibwire.synth.<table>), into scen.<table>."""
    from importlib import import_module

    ops = import_module(f"ibwire.synth.{table}").OPS
    (a, b), op, least, (tag, tag_default, tag_hi) = _STORAGE[table]
    for i, p in enumerate(doc.get(table, [])):
        ln = lambda k="", i=i: src.line_of(table, i, k)  # noqa: E731
        need_port(p.get(a), table, i, a)
        need_port(p.get(b), table, i, b)
        if p.get("op", op) not in ops:
            src.fail(ln("op"), f"op {p.get('op')!r} is not one of {', '.join(ops)}")
        getattr(scen, table).append(
            {
                a: p[a],
                b: p[b],
                f"{a}_qpn": _ranged(p.get(f"{a}_qpn", 0x100), f"{a}_qpn", 2, 0xFFFFFF, src, ln(f"{a}_qpn")),
                f"{b}_qpn": _ranged(p.get(f"{b}_qpn", 0x200), f"{b}_qpn", 2, 0xFFFFFF, src, ln(f"{b}_qpn")),
                "op": p.get("op", op),
                "count": _ranged(p.get("count", 1), "count", 1, MAX_COUNT, src, ln("count")),
                "size": _ranged(p.get("size", 4096), "size", least, 1 << 20, src, ln("size")),
                "at": _float(p.get("at_us", 0.0), "at_us", src, ln("at_us")) * 1e-6,
                "interval": _float(p.get("interval_us", 100.0), "interval_us", src, ln("interval_us")) * 1e-6,
                "cm": bool(p.get("cm", True)),
                "mtu": _ranged(p.get("mtu", 1024), "mtu", 256, 4096, src, ln("mtu")),
                tag: _ranged(p.get(tag, tag_default), tag, 0, tag_hi, src, ln(tag)),
            }
        )
        if table == "nfs":
            scen.nfs[-1]["version"] = _ranged(p.get("version", 1), "version", 1, 2, src, ln("version"))
        if table == "nvme":
            scen.nvme[-1]["qid"] = _ranged(p.get("qid", 1), "qid", 1, 0xFFFE, src, ln("qid"))


def _lossless(doc, scen: Scenario, src: _Src, need_port) -> None:
    """[[pfc]] and [[lldp]]: the pause and DCBX frames ports send (Ethernet links only)."""
    if (doc.get("pfc") or doc.get("lldp")) and scen.link not in ("roce2", "roce2-v6", "roce1"):
        src.fail(
            src.line_of("pfc" if doc.get("pfc") else "lldp", 0),
            "PFC and LLDP frames need an Ethernet link (roce2, roce2-v6 or roce1)",
        )
    for i, p in enumerate(doc.get("pfc", [])):
        ln = lambda k="", i=i: src.line_of("pfc", i, k)  # noqa: E731
        need_port(p.get("port"), "pfc", i, "port")
        if "priority" not in p and not p.get("pause", False):
            src.fail(ln(), "a [[pfc]] needs the priority it pauses (or pause = true for an 802.3x PAUSE)")
        scen.pfc.append(
            {
                "port": p["port"],
                "pause": bool(p.get("pause", False)),
                "priority": _ranged(p.get("priority", 0), "priority", 0, 7, src, ln("priority")),
                "quanta": _ranged(p.get("quanta", 0xFFFF), "quanta", 1, 0xFFFF, src, ln("quanta")),
                "at": _float(p.get("at_us", 0.0), "at_us", src, ln("at_us")) * 1e-6,
                "count": _ranged(p.get("count", 1), "count", 1, MAX_COUNT, src, ln("count")),
                "interval": _float(p.get("interval_us", 100.0), "interval_us", src, ln("interval_us")) * 1e-6,
                "xon": bool(p.get("xon", False)),
            }
        )
    for i, p in enumerate(doc.get("lldp", [])):
        ln = lambda k="", i=i: src.line_of("lldp", i, k)  # noqa: E731
        need_port(p.get("port"), "lldp", i, "port")
        apps = []
        for a in p.get("apps", []):
            parts = a.split(":")
            if len(parts) != 3 or not all(x.strip().isdigit() for x in parts):
                src.fail(ln("apps"), f'an application is PRIORITY:SELECTOR:PROTOCOL such as "3:3:4791", not {a!r}')
            prio, sel, proto = map(int, parts)
            if prio > 7 or not 1 <= sel <= 7 or proto > 0xFFFF:
                src.fail(ln("apps"), f"application {a!r}: priority 0-7, selector 1-7, protocol 0-65535")
            apps.append((prio, sel, proto))
        scen.lldp.append(
            {
                "port": p["port"],
                "at": _float(p.get("at_us", 0.0), "at_us", src, ln("at_us")) * 1e-6,
                "pfc": [_ranged(x, "pfc priority", 0, 7, src, ln("pfc")) for x in p.get("pfc", [])],
                "apps": apps,
                "willing": bool(p.get("willing", False)),
            }
        )
