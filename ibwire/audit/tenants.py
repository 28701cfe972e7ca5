"""tenants.toml: which tenant owns which endpoint.

    [tenants.red]
    endpoints = [
      { port_guid = "0x0002c90300a1b201" },          # native IB: mapped to a LID, matched by GID
      { lid = 7 }, { gid = "fe80::2:c903:a1:b202" },
      { pf = "mlx5_0", vf = 2 },                      # port GUID read from sysfs (or give port_guid too)
      { name = "vm1", host = "hv1", pf = "mlx5_0", vf = 0, port_guid = "0x0002c90300a1f000" },  # name/host label it
      { mac = "02:00:00:00:01:01", ip = "10.1.0.0/24", vlan = 101 },   # RoCE: all given keys must match
    ]

`[[tenant]] name = "red"` with the same `endpoints` list is accepted too.  An endpoint names one
port (GUID/LID/GID/VF) or one RoCE interface (MAC/IP/VLAN); traffic from or to an endpoint no tenant
names belongs to no tenant and is reported as such.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Optional

from ibwire.errors import InputError, UserError
from ibwire.files.inputfile import key_line, not_a_key, parse_toml, read_text, type_name

_KEYS = {"port_guid", "lid", "gid", "mac", "ip", "vlan", "pf", "vf", "host", "name", "description"}


@dataclass
class Endpoint:
    tenant: str
    label: str
    port_guid: Optional[int] = None
    lid: Optional[int] = None
    gid: Optional[str] = None
    mac: Optional[str] = None
    net: Optional[object] = None  # ipaddress network (a host is a /32 or /128)
    vlan: Optional[int] = None
    pf: Optional[str] = None
    vf: Optional[int] = None

    @property
    def is_roce(self) -> bool:
        return self.mac is not None or self.net is not None or self.vlan is not None

    def describe(self) -> str:
        parts = []
        if self.port_guid is not None:
            parts.append(f"guid 0x{self.port_guid:016x}")
        if self.pf is not None:
            parts.append(f"{self.pf} vf {self.vf}")
        if self.lid is not None:
            parts.append(f"lid {self.lid}")
        if self.gid:
            parts.append(f"gid {self.gid}")
        if self.mac:
            parts.append(f"mac {self.mac}")
        if self.net is not None:
            parts.append(f"ip {self.net}")
        if self.vlan is not None:
            parts.append(f"vlan {self.vlan}")
        return ", ".join(parts) or "(empty)"


@dataclass
class Tenants:
    names: list = field(default_factory=list)
    endpoints: list = field(default_factory=list)
    path: str = ""

    def endpoint_of(self, port_guid: int) -> Optional[Endpoint]:
        """The first endpoint declared with this port GUID."""
        return next((ep for ep in self.endpoints if ep.port_guid == port_guid), None)


def _norm_mac(v: str) -> str:
    h = str(v).lower().replace("-", "").replace(":", "").replace(".", "")
    if len(h) != 12 or any(c not in "0123456789abcdef" for c in h):
        raise ValueError(f"bad MAC address '{v}'")
    return ":".join(h[i : i + 2] for i in range(0, 12, 2))


def _num(v, what: str, lo: int = 0, hi: int = (1 << 64) - 1) -> int:
    """An integer within the field's range on the wire (IBA: LIDs 1-0xBFFF unicast, GUIDs 64 bits)."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"bad {what} {v!r}")
    try:
        n = v if isinstance(v, int) else int(v.strip(), 0)
    except ValueError:
        raise ValueError(f"bad {what} {v!r}") from None
    if not lo <= n <= hi:
        raise ValueError(f"{what} {v!r} is outside {lo:#x}..{hi:#x}")
    return n


def _endpoint(tenant: str, i: int, raw) -> Endpoint:
    if isinstance(raw, (str, int)) and not isinstance(raw, bool):
        raw = {"port_guid": raw}
    if not isinstance(raw, dict):
        raise ValueError('an endpoint is a table such as { port_guid = "0x..." }')
    for k in raw:
        if k not in _KEYS:
            raise ValueError(not_a_key(k, _KEYS))
        if k in _TEXT and not isinstance(raw[k], str):
            raise ValueError(f"{k} must be a string, not {type_name(raw[k])} ({raw[k]!r})")
    ep = Endpoint(tenant, raw.get("name", f"{tenant}#{i + 1}"))
    if "port_guid" in raw:
        ep.port_guid = _num(raw["port_guid"], "port GUID", 1)
    if "lid" in raw:
        ep.lid = _num(raw["lid"], "LID", 1, 0xBFFF)
    if "gid" in raw:
        ep.gid = str(ipaddress.IPv6Address(raw["gid"]))
    if "mac" in raw:
        ep.mac = _norm_mac(raw["mac"])
    if "ip" in raw:
        ep.net = ipaddress.ip_network(raw["ip"], strict=False)
    if "vlan" in raw:
        ep.vlan = _num(raw["vlan"], "VLAN", 0, 4095)
    if ("pf" in raw) != ("vf" in raw):
        raise ValueError('a VF endpoint needs both pf = "mlx5_0" and vf = N')
    if "pf" in raw:
        ep.pf, ep.vf = raw["pf"], _num(raw["vf"], "VF number", 0, 0xFFFF)
    if not any(getattr(ep, k) is not None for k in ("port_guid", "lid", "gid", "mac", "net", "vlan", "pf")):
        raise ValueError("the endpoint names nothing (give port_guid, lid, gid, mac, ip, vlan or pf/vf)")
    return ep


_HEAD = re.compile(r"""\s*\[\s*tenants\s*\.\s*(["']?)(.+?)\1\s*\]|\s*name\s*=\s*["'](.*?)["']""")


def _heads(lines: list) -> dict:
    """Tenant name -> index of the first line that may open its table, for all names in one pass (a
    search per tenant made thousands of tenants cost seconds)."""
    out: dict = {}
    for i, ln in enumerate(lines):
        m = _HEAD.match(ln)
        if m:
            out.setdefault(m.group(2) if m.group(2) is not None else m.group(3), i)
    return out


def _lines(lines: list, name: str, heads: dict) -> tuple:
    """(line of tenant `name`'s table, lines of its inline endpoint tables), 1-based; 0 when not found."""
    at = heads.get(name)
    if at is None:  # a name the one-pass pattern reads otherwise
        spelt = "|".join(map(re.escape, {name, json.dumps(name)[1:-1]}))  # as written, or with TOML's \u escapes
        head = re.compile(rf"""\s*\[\s*tenants\s*\.\s*(["']?)(?:{spelt})\1\s*\]|\s*name\s*=\s*["'](?:{spelt})["']""")
        at = next((i for i, ln in enumerate(lines) if head.match(ln)), None)
    if at is None:
        return 0, []
    if lines[at].lstrip().startswith("name"):  # [[tenant]] name = "...": its table starts above
        at = next((i for i in range(at, -1, -1) if lines[i].lstrip().startswith("[")), at)
    eps = []
    for j in range(at + 1, len(lines)):
        if re.match(r"\s*\[", lines[j]):
            break
        eps += [j + 1] * lines[j].split("#")[0].count("{")
    return at + 1, eps


_SAME = (
    ("port_guid", lambda ep: ep.port_guid, "port GUID {:#018x}"),
    ("lid", lambda ep: ep.lid, "LID {}"),
    ("gid", lambda ep: ep.gid, "GID {}"),
    ("roce", lambda ep: ep.is_roce and (ep.mac, str(ep.net), ep.vlan), "RoCE endpoint {}"),
)


_TOP = {"tenants", "tenant"}
_TENANT_KEYS = {"endpoints", "port_guids", "lids", "gids", "macs", "ips", "vlans"}
_TEXT = ("name", "host", "description", "pf", "gid", "mac", "ip")  # endpoint keys whose values are strings


def _entries(doc: dict, text: str, path: str) -> list:
    """(name, endpoint tables, line of its table, lines of its endpoints) of every tenant, `[tenants.NAME]`
    and `[[tenant]] name = ...` alike, every key and type checked; `port_guids = [...]` and the other
    list keys become one endpoint per item."""
    for k in doc:
        if k not in _TOP:
            raise InputError(
                path, key_line(text, k), not_a_key(k, _TOP, "tenants.toml") + " (tenants are [tenants.NAME] tables)"
            )
    tables, listed = doc.get("tenants", {}), doc.get("tenant", [])
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise InputError(
            path, key_line(text, "tenants"), "tenants must hold tables: [tenants.NAME] with endpoints = [...]"
        )
    if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
        raise InputError(
            path,
            key_line(text, "tenant"),
            'tenant must be an array of tables: [[tenant]] with name = "..." and endpoints = [...]',
        )
    entries = list(tables.items())
    for t in listed:
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise InputError(
                path,
                0,
                'every [[tenant]] needs name = "..."'
                if "name" not in t
                else f"a [[tenant]] name is {type_name(t['name'])} ({t['name']!r}); give a string",
            )
        entries.append((t["name"], {k: v for k, v in t.items() if k != "name"}))
    out = []
    lines = text.splitlines()
    heads = _heads(lines)
    for name, body in entries:
        head, ep_lines = _lines(lines, name, heads)
        for k in body:
            if k not in _TENANT_KEYS:
                raise InputError(path, key_line(text, k, head), f"tenant '{name}': " + not_a_key(k, _TENANT_KEYS))
        eps = body.get("endpoints", [])
        if not isinstance(eps, list):
            raise InputError(
                path,
                key_line(text, "endpoints", head),
                f"tenant '{name}': endpoints must be a list of tables, not {type_name(eps)}",
            )
        for key in sorted(_TENANT_KEYS - {"endpoints"}):
            more = body.get(key, [])
            if not isinstance(more, list):
                raise InputError(
                    path, key_line(text, key, head), f"tenant '{name}': {key} must be a list, not {type_name(more)}"
                )
            eps = eps + [{key[:-1]: v} for v in more]
        out.append((name, eps, head, ep_lines))
    return out


def parse_tenants(text: str, path: str = "<tenants>") -> Tenants:
    doc = parse_toml(text, path)
    entries = _entries(doc, text, path)
    if not entries:
        raise UserError(f"{path} declares no tenants; add [tenants.NAME] tables with endpoints = [...]")
    out = Tenants(path=path)
    owner: dict = {}  # (kind, identity) -> (tenant, line)
    for name, eps, head, ep_lines in entries:
        if name in out.names:
            raise InputError(path, head, f"tenant '{name}' is declared twice")
        out.names.append(name)
        for i, raw in enumerate(eps):
            line = ep_lines[i] if i < len(ep_lines) else head
            try:
                ep = _endpoint(name, i, raw)
            except ValueError as e:
                raise InputError(path, line, f"tenant '{name}' endpoint {i + 1}: {e}") from None
            for kind, key, text_of in _SAME:
                ident = key(ep)
                if ident is None or ident is False:
                    continue
                first = owner.setdefault((kind, ident), (name, line))
                if first[0] != name:
                    raise InputError(
                        path,
                        line,
                        f"{text_of.format(ident)} is given to tenant '{first[0]}' "
                        f"(line {first[1]}) and to tenant '{name}'; an endpoint belongs "
                        "to one tenant",
                    )
            out.endpoints.append(ep)
    return out


def load_tenants(path: str) -> Tenants:
    return parse_tenants(read_text(path, "tenants file", "give --tenants tenants.toml"), str(path))
