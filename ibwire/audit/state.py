"""Hardware state: the P_Key tables actually programmed into each port, and who has which LID.

Sources, each recording itself in `PortState.source`:
- `ibwire fabric FILE --format json` output (the fabric view rebuilt from a capture's MADs);
- a live fabric through infiniband-diags: `ibnetdiscover -p` (end ports), `saquery NR` (port GUID),
  `sminfo` (master SM) and `smpquery pkeys LID [port]` (IBA 14.2.5.7 P_KeyTable);
- sysfs on the PF host: /sys/class/infiniband/DEV/ports/N/{lid,gids/0,pkeys/I} (Linux
  Documentation/ABI/stable/sysfs-class-infiniband) and each VF bound on the host found through
  DEV/device/virtfnK/infiniband/VFDEV (sysfs-bus-pci); the VF's port GUID also from
  DEV/device/sriov/K/port where the mlx5 driver exposes it;
- the capture itself: NodeInfo/PortInfo/P_KeyTable/SMInfo MADs (see mads.MadObserver).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from dissectors.numbers import PKEY_BASE
from ibwire.analyze.fabric.sm import elect
from ibwire.errors import InputError, UserError
from ibwire.files.inputfile import not_a_key, parse_json, read_text, type_name


@dataclass
class PortState:
    guid: int
    lid: Optional[int] = None
    node_type: str = "ca"  # ca | switch | router
    node_guid: Optional[int] = None
    port_num: Optional[int] = None
    description: str = ""
    pkeys: Optional[list] = None  # programmed table in index order, 0x0000 entries removed; None = unknown
    gids: list = field(default_factory=list)
    source: str = ""  # where the LID/GUID facts came from
    pkey_source: str = ""  # where the table came from
    device: str = ""  # sysfs: mlx5_0, or mlx5_0 vf 2

    def table(self) -> Optional[set]:
        return None if self.pkeys is None else {p for p in self.pkeys if p & PKEY_BASE}


@dataclass
class FabricState:
    ports: dict = field(default_factory=dict)  # port GUID -> PortState
    master_sm: Optional[int] = None  # port GUID
    sm_claims: dict = field(default_factory=dict)  # port GUID -> {(SMState text, frame or None)}
    sources: list = field(default_factory=list)

    def port(self, guid: int, source: str) -> PortState:
        ps = self.ports.get(guid)
        if ps is None:
            ps = self.ports[guid] = PortState(guid, source=source)
        return ps

    def by_lid(self, lid: int) -> list:
        return [p for p in self.ports.values() if p.lid == lid]

    def merge(self, other: "FabricState") -> None:
        """Add facts from another source without overwriting what is already known."""
        for guid, o in other.ports.items():
            mine = self.ports.get(guid)
            if mine is None:
                self.ports[guid] = o
                continue
            for name in ("lid", "node_guid", "port_num", "pkeys"):
                if getattr(mine, name) is None and getattr(o, name) is not None:
                    setattr(mine, name, getattr(o, name))
                    if name == "pkeys":
                        mine.pkey_source = o.pkey_source
            mine.description = mine.description or o.description
            mine.gids = mine.gids or o.gids
        self.master_sm = self.master_sm or other.master_sm
        for k, v in other.sm_claims.items():
            self.sm_claims.setdefault(k, v)
        self.sources += [s for s in other.sources if s not in self.sources]


def _int(v) -> Optional[int]:
    if v is None or v == "":
        return None
    if isinstance(v, int):
        return v
    try:
        return int(str(v).strip(), 0)
    except ValueError:
        return None


def gid_port_guid(gid: str) -> Optional[int]:
    """The port GUID is the interface ID, the low 64 bits of a port's GID (IBA 4.1.1)."""
    try:
        return int.from_bytes(ipaddress.IPv6Address(gid).packed[8:], "big")
    except ValueError:
        return None


# -- ibwire fabric JSON ----------------------------------------------------------------------------
_NODE_TYPES = {
    1: "ca",
    2: "switch",
    3: "router",
    "ca": "ca",
    "switch": "switch",
    "router": "router",
    "channel adapter": "ca",
    "hca": "ca",
}


def from_fabric_json(path: str) -> FabricState:
    """`ibwire fabric FILE --format json` (schema in ibwire/analyze/fabric/__init__.py): top-level `nodes` (guid, type,
    description) and `ports` (guid, node_guid, port_num, lid, pkeys, pkeys_last); the master SM is the first
    MASTER in `sm.seen`, as the audit decides it from a capture.  A port whose table was never read or written
    (`pkeys_last` null) has an unknown table, not an empty one; a switch's table is its port 0's."""
    hint = "give the output of 'ibwire fabric CAPTURE --format json'"
    text = read_text(path, "fabric state", hint)
    doc = parse_json(text, path, hint)
    if not isinstance(doc, dict) or not isinstance(doc.get("ports"), list):
        raise UserError(f"{path} is not 'ibwire fabric --format json' output (no \"ports\" list)")
    _check_schema(doc, _SCHEMA, (), _Lines(path, text))
    _check_fabric_json(doc, path, text)
    return from_view(doc, f"fabric json {Path(path).name}", f"fabric json {path}")


def from_view(doc: dict, src: str, source: str, tables: str = "") -> FabricState:
    """The hardware state in a fabric view (ibwire.analyze.fabric.view; read back from its JSON or built from
    the audited capture): `src` names it in each port's facts, `tables` (default `src`) in its P_Key
    table's, `source` in the state's sources."""
    st = FabricState(sources=[source])
    nodes = {_int(n.get("guid")): n for n in doc.get("nodes") or [] if isinstance(n, dict)}
    for p in doc["ports"]:
        guid = _int(p.get("guid")) if isinstance(p, dict) else None
        if guid is None:
            continue
        node = nodes.get(_int(p.get("node_guid")), {})
        ntype = _NODE_TYPES.get(str(node.get("type") or "ca").lower(), "ca")
        num = _int(p.get("port_num"))
        known = guid in st.ports
        ps = st.port(guid, src)
        if known and (ntype != "switch" or num != 0):
            ps.lid = ps.lid or _int(p.get("lid"))
            continue  # switch ports 1-n share port 0's GUID
        ps.node_type, ps.node_guid, ps.port_num = ntype, _int(p.get("node_guid")), num
        ps.lid = _int(p.get("lid")) or ps.lid
        ps.description = node.get("description") or ""
        if p.get("pkeys_last") is not None:
            ps.pkeys = [v for v in (_int(x) for x in p.get("pkeys") or []) if v and v & PKEY_BASE]
            ps.pkey_source = (tables or src) + f" ({p['pkeys_last']} in frame {p.get('pkeys_frame')})"
    sm = doc.get("sm") or {}
    master, _ = elect(
        [
            {"guid": _int(s.get("guid")), "state": s.get("state"), "priority": _int(s.get("priority")) or 0}
            for s in sm.get("seen") or []
            if isinstance(s, dict) and _int(s.get("guid")) is not None
        ]
    )
    if master:
        st.master_sm = master["guid"]
    elif sm.get("master_lid") is not None:
        who = st.by_lid(_int(sm["master_lid"]))
        st.master_sm = who[0].guid if len(who) == 1 else None
    return st


# `ibwire fabric --format json`, key by key (ibwire/analyze/fabric/__init__.py): a value is a number (N; also hex
# text such as "0x8001"), text (S), true/false (B), any of those (ANY), an object ((what it is, its keys);
# "*": any key) or a list of one kind ([kind]).  Any value may be null; a list item may not.
N, S, B, ANY = "a number", "a string", "true or false", "a number, string or true/false"
_SMINFO = ("an SM", {"guid": N, "lid": N, "priority": N, "state": S, "actcount": N, "sm_key": N, "frame": N})
_END = ("a link end", {"node_guid": N, "port_num": N})
_SCHEMA = (
    "the fabric state",
    {
        "capture": S,
        "mads": N,
        "smps": N,
        "nodes": [
            (
                "a node",
                {
                    "guid": N,
                    "type": S,
                    "description": S,
                    "system_image_guid": N,
                    "num_ports": N,
                    "device_id": N,
                    "vendor_id": N,
                    "enhanced_port0": B,
                },
            )
        ],
        "ports": [
            (
                "a port",
                {
                    "guid": N,
                    "node_guid": N,
                    "port_num": N,
                    "lid": N,
                    "lmc": N,
                    "state": S,
                    "master_sm_lid": N,
                    "partition_enforcement": ("partition_enforcement", {"inbound": N, "outbound": N}),
                    "violations": ("violations", {"m_key": N, "p_key": N, "q_key": N}),
                    "pkeys": [N],
                    "pkey_table": [N],
                    "pkeys_last": S,
                    "pkeys_frame": N,
                    "link_width_active": N,
                    "link_speed_active": N,
                    "link_speed_ext_active": N,
                    "capability_mask": N,
                },
            )
        ],
        "sm": ("sm", {"master": _SMINFO, "master_lid": N, "seen": [_SMINFO], "rogues": [_SMINFO]}),
        "links": [
            (
                "a link",
                {
                    "a": _END,
                    "b": _END,
                    "active": S,
                    "active_gbps": N,
                    "best_supported": S,
                    "best_supported_gbps": N,
                    "best_enabled": S,
                    "best_enabled_gbps": N,
                    "below_supported": B,
                    "below_enabled": B,
                },
            )
        ],
        "traps": [
            (
                "a trap",
                {
                    "frame": N,
                    "time": N,
                    "slid": N,
                    "dlid": N,
                    "generic": B,
                    "type": N,
                    "number": N,
                    "issuer_lid": N,
                    "details": ("details", {"*": ANY}),
                },
            )
        ],
    },
)
_KINDS = {N: (int, float, str), S: (str,), B: (bool,), ANY: (int, float, str, bool)}


class _Lines:
    """Lines of a parsed JSON document's values, worked out at the first error."""

    def __init__(self, path: str, text: str):
        self.path, self.text, self.lines = path, text, None

    def fail(self, where: tuple, message: str):
        if self.lines is None:
            self.lines = _json_lines(self.text)
        raise InputError(self.path, self.lines.get(where, 0), message)


def _check_schema(v, kind, where: tuple, lines: _Lines) -> None:
    """Every key is one the schema names (else the closest one is suggested) and every value of its type."""
    name = where[-1] if where and isinstance(where[-1], str) else None
    if isinstance(kind, tuple):
        what, keys = kind
        if not isinstance(v, dict):
            lines.fail(where, f"{what} must be an object, not {type_name(v, 'an object')}")
        for k, x in v.items():
            sub = keys.get("*", keys.get(k))
            if sub is None:
                lines.fail(where + (k,), not_a_key(k, keys, what))
            if x is not None:
                _check_schema(x, sub, where + (k,), lines)
    elif isinstance(kind, list):
        if not isinstance(v, list):
            lines.fail(where, f"{name} must be a list, not {type_name(v, 'an object')}")
        for i, x in enumerate(v):
            if x is None:
                item = kind[0][0] if isinstance(kind[0], tuple) else kind[0]
                lines.fail(where + (i,), f"{name} holds null; give {item}")
            _check_schema(x, kind[0], where + (i,), lines)
    elif not isinstance(v, _KINDS[kind]) or (kind == N and isinstance(v, bool)):
        lines.fail(where, f"{name or where[-2]} {json.dumps(v)[:60]} is not {kind}")


_RANGES = {
    "guid": (1, (1 << 64) - 1, "a 64-bit GUID"),
    "node_guid": (1, (1 << 64) - 1, "a 64-bit GUID"),
    "lid": (1, 0xBFFF, "a unicast LID (1-0xBFFF)"),
    "port_num": (0, 254, "a port number (0-254)"),
    "pkeys": (0, 0xFFFF, "a 16-bit P_Key"),
    "master_lid": (1, 0xBFFF, "a unicast LID (1-0xBFFF)"),
}


def _check_fabric_json(doc: dict, path: str, text: str) -> None:
    """Every GUID, LID, port number and P_Key the audit uses is a number within its width (IBA 4.1, 10.9),
    or an error naming its line; a wrong one would silently move a port out of a finding."""
    lines = None

    def bad(where: tuple, key: str, v) -> None:
        nonlocal lines
        lines = lines if lines is not None else _json_lines(text)
        raise InputError(path, lines.get(where, 0), f"{key} {json.dumps(v)} is not {_RANGES[key][2]}")

    def check(where: tuple, key: str, v, optional: bool = True) -> None:
        if v is None and optional:
            return
        n = _int(v) if not isinstance(v, bool) else None
        lo, hi, _ = _RANGES[key]
        if n is None or not lo <= n <= hi:
            bad(where, key, v)

    for i, p in enumerate(doc["ports"]):
        if not isinstance(p, dict):
            continue
        check(("ports", i, "guid"), "guid", p.get("guid"), optional=False)
        for key in ("node_guid", "port_num"):
            check(("ports", i, key), key, p.get(key))
        if p.get("lid") not in (None, 0):  # 0: no LID assigned yet
            check(("ports", i, "lid"), "lid", p.get("lid"))
        for j, k in enumerate(p.get("pkeys") or []):
            check(("ports", i, "pkeys", j), "pkeys", k, optional=False)
    sm = doc.get("sm") if isinstance(doc.get("sm"), dict) else {}
    check(("sm", "master_lid"), "master_lid", sm.get("master_lid"))
    for i, seen in enumerate(sm.get("seen") or []):
        if isinstance(seen, dict):
            check(("sm", "seen", i, "guid"), "guid", seen.get("guid"))


def _json_lines(text: str) -> dict:
    """Path (keys and indexes) -> 1-based line where that value starts, for a JSON document that parsed."""
    out, stack, line, i, key = {}, [], 1, 0, None  # stack: [container path, next index or None]
    while i < len(text):
        c = text[i]
        if c == "\n":
            line += 1
        elif c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            word = json.loads(text[i : j + 1])
            after = text[j + 1 : j + 40].lstrip()
            if stack and stack[-1][1] is None and after.startswith(":"):
                key = word
            else:
                _mark(out, stack, key, line)
                key = None
            i = j
        elif c in "{[":
            path = _mark(out, stack, key, line)
            key = None
            stack.append([path, 0 if c == "[" else None])
        elif c in "}]":
            stack.pop()
        elif c not in " \t\r,:":
            _mark(out, stack, key, line)
            key = None
            while i + 1 < len(text) and text[i + 1] not in ",}]\n \t\r":
                i += 1
        i += 1
    return out


def _mark(out: dict, stack: list, key, line: int) -> tuple:
    if not stack:
        return ()
    top = stack[-1]
    if top[1] is None:
        path = top[0] + (key,)
    else:
        path, top[1] = top[0] + (top[1],), top[1] + 1
    out[path] = line
    return path


# -- live fabric through infiniband-diags ----------------------------------------------------------
def _run(cmd: list, timeout: float = 10.0) -> str:
    try:  # in a scratch cwd: under ibsim's libumad2sim a diag tool writes a simulated sysfs (./sys-PID) there
        with tempfile.TemporaryDirectory(prefix="ibwire-diag-") as scratch:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy(), cwd=scratch
            )
    except FileNotFoundError:
        raise UserError(f"'{cmd[0]}' is not installed; install infiniband-diags for --state live") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"'{' '.join(cmd)}' did not answer in {timeout:.0f} s; is the fabric up?") from None
    if out.returncode != 0:
        raise UserError(
            f"'{' '.join(cmd)}' failed ({out.stderr.strip().splitlines()[-1:] or out.returncode}); "
            f"check that an SM is running and this host can reach it"
        )
    return out.stdout


def parse_smpquery_pkeys(text: str) -> list:
    """`smpquery pkeys` lines '   0: 0xffff 0x8001 ...' -> table entries in index order, zeros removed."""
    entries = []
    for line in text.splitlines():
        m = re.match(r"\s*(\d+):((?:\s+0x[0-9a-fA-F]{4})+)\s*$", line)
        if m:
            entries += [int(x, 16) for x in m.group(2).split()]
    return [e for e in entries if e & PKEY_BASE]


def parse_saquery_nodes(text: str) -> list:
    """`saquery` NodeRecord dump -> dicts with lid, node_type, node_guid, port_guid, port_num, desc."""
    recs, cur = [], None
    for line in text.splitlines():
        if line.startswith("NodeRecord dump"):
            cur = {}
            recs.append(cur)
            continue
        m = re.match(r"\s*(\w+)\.{2,}(.*)$", line)
        if m and cur is not None:
            cur[m.group(1).lower()] = m.group(2).strip()
    return recs


def parse_ibnetdiscover_ports(text: str) -> list:
    """`ibnetdiscover -p` lines 'CA  6  1 0x...' / 'SW  3  5 0x...' -> end ports as (type, LID, port)."""
    out = set()
    for m in re.finditer(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+0x[0-9a-fA-F]+", text, re.M):
        kind = {"CA": "ca", "SW": "switch", "RT": "router"}[m.group(1)]
        out.add((kind, int(m.group(2)), 0 if kind == "switch" else int(m.group(3))))
    return sorted(out, key=lambda t: t[1])


def from_live(timeout: float = 10.0) -> FabricState:
    """Ask the fabric this host is attached to: `ibnetdiscover -p` for the end ports' LIDs, `saquery NR LID`
    for their GUIDs (one LID per query: SA GetTable answers need RMPP, which not every path carries),
    `sminfo` for the master SM and `smpquery pkeys LID [port]` for each programmed table."""
    st = FabricState(sources=["live: ibnetdiscover -p, saquery NR, sminfo, smpquery pkeys"])
    for kind, lid, num in parse_ibnetdiscover_ports(_run(["ibnetdiscover", "-p"], timeout)):
        recs = parse_saquery_nodes(_run(["saquery", "NR", str(lid)], timeout))
        guid = _int(recs[0].get("port_guid")) if recs else None
        if guid is None:
            continue
        ps = st.port(guid, "live saquery NodeRecord")
        ps.lid, ps.node_type, ps.port_num = lid, kind, num
        ps.node_guid = _int(recs[0].get("node_guid"))
        ps.description = recs[0].get("nodedescription", "")
        ps.pkeys = parse_smpquery_pkeys(_run(["smpquery", "pkeys", str(lid), str(num)], timeout))
        ps.pkey_source = "live smpquery pkeys"
    m = re.search(r"sm guid (0x[0-9a-fA-F]+).*?state \d+ (\w+)", _run(["sminfo"], timeout))
    if m:
        st.master_sm = int(m.group(1), 16)
        st.sm_claims[st.master_sm] = {(m.group(2).upper().removeprefix("SMINFO_"), None)}  # read live: no frame
    return st


# -- sysfs on the PF host --------------------------------------------------------------------------
def _read(p: Path) -> Optional[str]:
    try:
        return p.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _sysfs_port(st: FabricState, dev_dir: Path, label: str, guid_override: Optional[int] = None) -> None:
    ports = dev_dir / "ports"
    for port_dir in sorted(ports.iterdir()) if ports.is_dir() else []:
        gid0 = _read(port_dir / "gids" / "0")
        guid = guid_override or (gid_port_guid(gid0) if gid0 else None)
        if not guid:
            continue
        ps = st.port(guid, f"sysfs {label}")
        ps.lid = _int(_read(port_dir / "lid"))
        ps.port_num = _int(port_dir.name)
        ps.node_guid = _int("0x" + (_read(dev_dir / "node_guid") or "").replace(":", "")) or None
        ps.device = label
        ps.gids = [gid0] if gid0 else []
        pk_dir = port_dir / "pkeys"
        if pk_dir.is_dir():
            idx = sorted((int(n.name), n) for n in pk_dir.iterdir() if n.name.isdigit())
            ps.pkeys = [v for v in (_int(_read(n)) for _, n in idx) if v and v & PKEY_BASE]
            ps.pkey_source = f"sysfs {label}"


def from_sysfs(root: Optional[str] = None) -> FabricState:
    base = Path(root or os.environ.get("IBWIRE_SYSFS_ROOT") or "/sys") / "class" / "infiniband"
    if not base.is_dir():
        raise UserError(
            f"{base} does not exist: this host has no RDMA devices (use --state with a fabric "
            f"JSON file, 'live', or 'capture')"
        )
    st = FabricState(sources=[f"sysfs {base}"])
    for dev_dir in sorted(base.iterdir()):
        _sysfs_port(st, dev_dir, dev_dir.name)
        pci = dev_dir / "device"
        for vf_link in sorted(pci.glob("virtfn*")):
            k = vf_link.name[len("virtfn") :]
            vf_guid = _int(_read(pci / "sriov" / k / "port"))
            vf_devs = sorted((vf_link / "infiniband").glob("*"))
            for vf_dev in vf_devs:
                _sysfs_port(st, vf_dev, f"{dev_dir.name} vf {k}", vf_guid or None)
            if not vf_devs:
                st.sources.append(
                    f"{dev_dir.name} vf {k}: its P_Key table is not in this host's sysfs (the VF "
                    f"is not bound to an RDMA driver here, e.g. passed to a VM); take it from "
                    f"the capture, --state live or a fabric JSON"
                )
    return st


def vf_port_guid(pf: str, vf: int, root: Optional[str] = None) -> Optional[int]:
    """Port GUID of VF `vf` of `pf`: mlx5's device/sriov/K/port, else the VF's own gids/0."""
    base = Path(root or os.environ.get("IBWIRE_SYSFS_ROOT") or "/sys") / "class" / "infiniband" / pf / "device"
    guid = _int(_read(base / "sriov" / str(vf) / "port"))
    if guid:
        return guid
    for vf_dev in (base / f"virtfn{vf}" / "infiniband").glob("*"):
        for gid_file in sorted((vf_dev / "ports").glob("*/gids/0")):
            g = gid_port_guid(_read(gid_file) or "")
            if g:
                return g
    return None
