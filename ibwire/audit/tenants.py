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
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import InputError, UserError

_KEYS = {"port_guid", "lid", "gid", "mac", "ip", "vlan", "pf", "vf", "host", "name", "description"}


@dataclass
class Endpoint:
    tenant: str
    label: str
    port_guid: Optional[int] = None
    lid: Optional[int] = None
    gid: Optional[str] = None
    mac: Optional[str] = None
    net: Optional[object] = None        # ipaddress network (a host is a /32 or /128)
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
    return ":".join(h[i:i + 2] for i in range(0, 12, 2))


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
        raise ValueError("an endpoint is a table such as { port_guid = \"0x...\" }")
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))} (use {', '.join(sorted(_KEYS))})")
    ep = Endpoint(tenant, str(raw.get("name", f"{tenant}#{i + 1}")))
    if "port_guid" in raw:
        ep.port_guid = _num(raw["port_guid"], "port GUID", 1)
    if "lid" in raw:
        ep.lid = _num(raw["lid"], "LID", 1, 0xBFFF)
    if "gid" in raw:
        ep.gid = str(ipaddress.IPv6Address(str(raw["gid"])))
    if "mac" in raw:
        ep.mac = _norm_mac(raw["mac"])
    if "ip" in raw:
        ep.net = ipaddress.ip_network(str(raw["ip"]), strict=False)
    if "vlan" in raw:
        ep.vlan = _num(raw["vlan"], "VLAN", 0, 4095)
    if ("pf" in raw) != ("vf" in raw):
        raise ValueError("a VF endpoint needs both pf = \"mlx5_0\" and vf = N")
    if "pf" in raw:
        ep.pf, ep.vf = str(raw["pf"]), _num(raw["vf"], "VF number", 0, 0xFFFF)
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
    if at is None:                                     # a name the one-pass pattern reads otherwise
        n = re.escape(name)
        head = re.compile(rf"""\s*\[\s*tenants\s*\.\s*(["']?){n}\1\s*\]|\s*name\s*=\s*["']{n}["']""")
        at = next((i for i, ln in enumerate(lines) if head.match(ln)), None)
    if at is None:
        return 0, []
    if lines[at].lstrip().startswith("name"):          # [[tenant]] name = "...": its table starts above
        at = next((i for i in range(at, -1, -1) if lines[i].lstrip().startswith("[")), at)
    eps = []
    for j in range(at + 1, len(lines)):
        if re.match(r"\s*\[", lines[j]):
            break
        eps += [j + 1] * lines[j].split("#")[0].count("{")
    return at + 1, eps


_SAME = (("port_guid", lambda ep: ep.port_guid, "port GUID {:#018x}"), ("lid", lambda ep: ep.lid, "LID {}"),
         ("gid", lambda ep: ep.gid, "GID {}"),
         ("roce", lambda ep: ep.is_roce and (ep.mac, str(ep.net), ep.vlan), "RoCE endpoint {}"))


def parse_tenants(text: str, path: str = "<tenants>") -> Tenants:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+)", str(e))
        line = int(m.group(1)) if m else (len(text.splitlines()) if "end of document" in str(e) else 0)
        raise InputError(path, line, f"{re.sub(r' *[(]at (line|end).*', '', str(e))}; fix the TOML syntax") from None
    entries = []
    if isinstance(doc.get("tenants"), dict):
        entries += list(doc["tenants"].items())
    for t in doc.get("tenant", []) if isinstance(doc.get("tenant"), list) else []:
        if not isinstance(t, dict) or "name" not in t:
            raise UserError(f"{path}: every [[tenant]] needs name = \"...\"")
        entries.append((str(t["name"]), t))
    if not entries:
        raise UserError(f"{path} declares no tenants; add [tenants.NAME] tables with endpoints = [...]")
    out = Tenants(path=path)
    owner: dict = {}                                   # (kind, identity) -> (tenant, line)
    lines = text.splitlines()
    heads = _heads(lines)
    for name, body in entries:
        head, ep_lines = _lines(lines, name, heads)
        if name in out.names:
            raise InputError(path, head, f"tenant '{name}' is declared twice")
        out.names.append(name)
        eps = body.get("endpoints", []) if isinstance(body, dict) else []
        if not isinstance(eps, list):
            raise InputError(path, head, f"tenant '{name}': endpoints must be a list of tables")
        for key in ("port_guids", "lids", "gids", "macs", "ips", "vlans"):
            more = body.get(key, []) if isinstance(body, dict) else []
            if not isinstance(more, list):
                raise InputError(path, head, f"tenant '{name}': {key} must be a list")
            eps = list(eps) + [{key[:-1]: v} for v in more]
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
                    raise InputError(path, line, f"{text_of.format(ident)} is given to tenant '{first[0]}' "
                                                 f"(line {first[1]}) and to tenant '{name}'; an endpoint belongs "
                                                 "to one tenant")
            out.endpoints.append(ep)
    return out


def load_tenants(path: str) -> Tenants:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UserError(f"cannot read the tenants file {path} ({e.strerror}); give --tenants tenants.toml") from None
    return parse_tenants(text, str(path))
