"""opensm partitions.conf: parse it the way opensm does and say what each port's P_Key table should hold.

Grammar and semantics follow opensm 3.3 (doc/partition-config.txt, opensm/osm_prtn_config.c,
osm_prtn.c): one line at a time, `#` starts a comment, `;` ends a partition, a partition's port list
may continue over several lines after its `Name[=PKey][,flag[=value]]* :` header, keywords and flags
match by prefix (`A` is `ALL`, `limi` is `limited`), an `mgid=` item consumes the rest of its line.
Before the file, opensm creates `Default=0x7fff : ALL=limited, SELF=full` (without a readable file:
`ALL=full`); within a partition the last statement naming a port wins; `both` gives full *and* limited
entries only with `--allow_both_pkeys`, otherwise it gives full.  opensm rejects the whole file on a
bad header or PortGUID and falls back to `Default=0x7fff : ALL=full`; we raise PolicyError instead.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UserError

DEFAULT_PKEY = 0x7FFF
FULL_BIT = 0x8000
IPOIB_QKEY = 0x0B1B
NODE_TYPES = ("ca", "switch", "router")

_KEYWORDS = (("ALL", None), ("ALL_CAS", "ca"), ("ALL_SWITCHES", "switch"), ("ALL_ROUTERS", "router"))
_GROUP_FLAGS = ("mtu", "rate", "scope", "Q_Key", "TClass", "sl", "FlowLabel")  # opensm's match order


class PolicyError(UserError):
    """partitions.conf that opensm would reject (it would then run with `Default=0x7fff : ALL=full`)."""

    def __init__(self, path: str, line: int, col: int, msg: str):
        self.path, self.line, self.col = path, line, col
        super().__init__(f"{path}:{line}:{col}: {msg}; opensm rejects this file and falls back to "
                         f"'Default=0x7fff : ALL=full', fix the line")


@dataclass
class Member:
    """One port-list item: a GUID or a keyword (ALL, ALL_CAS, ALL_SWITCHES, ALL_ROUTERS, SELF)."""
    who: object              # int port GUID, or keyword string
    membership: str          # full | limited | both
    line: int = 0
    col: int = 0


@dataclass
class McastGroup:
    mgid: str
    flags: dict
    line: int


@dataclass
class Partition:
    name: str
    pkey: int                # 15-bit base
    line: int
    ipoib: bool = False
    indx0: bool = False
    flags: dict = field(default_factory=dict)
    members: list = field(default_factory=list)
    mgroups: list = field(default_factory=list)

    @property
    def ipoib_broadcast_mgid(self) -> str:
        """IPoIB broadcast group ff12:401b:PKEY::ffff:ffff with the full-member P_Key (RFC 4391 §4)."""
        return str(ipaddress.IPv6Address(bytes([0xFF, 0x12, 0x40, 0x1B, (self.pkey | FULL_BIT) >> 8,
                                                self.pkey & 0xFF] + [0] * 6 + [0xFF] * 4)))


@dataclass
class Port:
    """What the policy needs to know about a port to resolve keywords."""
    guid: int
    node_type: str = "ca"
    is_sm: bool = False


class Policy:
    """Parsed partitions.conf: partitions by base P_Key, in opensm's evaluation order."""

    def __init__(self, path: str = "<policy>", allow_both_pkeys: bool = False, file_found: bool = True):
        self.path = path
        self.allow_both_pkeys = allow_both_pkeys
        self.partitions: dict[int, Partition] = {}
        self.warnings: list[str] = []
        self._counter = 0
        default = Partition("Default", DEFAULT_PKEY, 0)
        default.members = [Member("ALL", "limited" if file_found else "full"), Member("SELF", "full")]
        if not file_found:
            default.ipoib = True
        self.partitions[DEFAULT_PKEY] = default

    # -- queries ---------------------------------------------------------------------------------
    def membership(self, port: Port) -> dict[int, str]:
        """Base P_Key -> 'full' | 'limited' | 'both' that opensm programs for this port."""
        out = {}
        for pk, part in self.partitions.items():
            m = None
            for mem in part.members:
                if _applies(mem.who, port):
                    m = mem.membership
            if m == "both" and not self.allow_both_pkeys:
                m = "full"
            if m:
                out[pk] = m
        return out

    def expected_table(self, port: Port) -> set[int]:
        """The 16-bit P_Key entries (membership bit included) opensm writes into this port's table."""
        keys = set()
        for pk, m in self.membership(port).items():
            if m in ("full", "both"):
                keys.add(pk | FULL_BIT)
            if m in ("limited", "both"):
                keys.add(pk)
        return keys

    def declared(self, pkey: int) -> bool:
        return (pkey & 0x7FFF) in self.partitions

    def name_of(self, pkey: int) -> str:
        p = self.partitions.get(pkey & 0x7FFF)
        return p.name if p else "undeclared"

    def ipoib_mgids(self) -> dict[str, int]:
        """MGID (text) of every IPoIB broadcast group opensm creates -> base P_Key."""
        return {p.ipoib_broadcast_mgid: pk for pk, p in self.partitions.items() if p.ipoib}

    # -- building --------------------------------------------------------------------------------
    def _partition(self, name: str, pkey: int, line: int) -> Partition:
        pkey &= 0x7FFF
        if not pkey:
            for p in self.partitions.values():
                if name and p.name == name:
                    return p
            while self._counter < DEFAULT_PKEY - 1:
                self._counter += 1
                if self._counter not in self.partitions:
                    pkey = self._counter
                    break
        if pkey in self.partitions:
            existing = self.partitions[pkey]
            if name and name != existing.name:
                self.warnings.append(f"line {line}: partition '{name}' repeats P_Key 0x{pkey:04x} of "
                                     f"'{existing.name}'; opensm merges them under the first name")
            return existing
        p = Partition(name or "", pkey, line)
        self.partitions[pkey] = p
        return p


def _applies(who, port: Port) -> bool:
    if who == "ALL":
        return True
    if who == "SELF":
        return port.is_sm
    if isinstance(who, str):
        return port.node_type == dict(_KEYWORDS)[who]
    return who == port.guid


def c_strtoul(text: str) -> Optional[int]:
    """C strtoul(text, &end, 0) that must consume everything: 0x.. hex, 0.. octal, else decimal."""
    t = text.strip()
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
        return int(t, 16)
    if re.fullmatch(r"0[0-7]*", t):
        return int(t, 8)
    if re.fullmatch(r"[1-9][0-9]*", t):
        return int(t)
    return None


def _prefix(word: str, full: str) -> bool:
    """opensm's strncmp(word, full, strlen(word)) == 0."""
    return full.startswith(word)


def _name_token(text: str, col: int):
    """`name[=value]` with surrounding blanks removed -> (name, name_col, value|None, value_col)."""
    left, eq, right = text.partition("=")
    name = left.strip()
    ncol = col + len(left) - len(left.lstrip())
    if not eq:
        return name, ncol, None, ncol
    vcol = col + len(left) + 1 + len(right) - len(right.lstrip())
    return name, ncol, right.strip(), vcol


def _split(text: str, col: int, sep: str = ","):
    """Split keeping the column where each piece starts."""
    pieces, start = [], 0
    for i, ch in enumerate(text):
        if ch == sep:
            pieces.append((text[start:i], col + start))
            start = i + 1
    pieces.append((text[start:], col + start))
    return pieces


class _Parser:
    def __init__(self, policy: Policy):
        self.policy = policy
        self.current: Optional[Partition] = None
        self.defmember = "limited"
        self.lineno = 0

    def error(self, col: int, msg: str):
        raise PolicyError(self.policy.path, self.lineno, col, msg)

    def warn(self, col: int, msg: str):
        self.policy.warnings.append(f"{self.policy.path}:{self.lineno}:{col}: {msg}")

    def line(self, raw: str):
        self.lineno += 1
        text = raw.rstrip("\n").split("#", 1)[0]
        pos = 0
        while pos < len(text):
            end = text.find(";", pos)
            seg = text[pos:] if end < 0 else text[pos:end]
            if seg.strip():
                self.segment(seg, pos + 1)
            elif end >= 0 and self.current is None:
                self.error(pos + 1, "';' without a partition definition before it")
            if end < 0:
                break
            self.current, self.defmember = None, "limited"
            pos = end + 1

    def segment(self, seg: str, col: int):
        if self.current is None:
            colon = seg.find(":")
            if colon < 0:
                self.error(col + len(seg) - len(seg.lstrip()),
                           "no partition definition found (expected 'Name[=PKey][,flags] :' before the port list)")
            self.header(seg[:colon], col)
            seg, col = seg[colon + 1:], col + colon + 1
        self.ports(seg, col)

    def header(self, text: str, col: int):
        pieces = _split(text, col)
        name, ncol, pkey_text, pcol = _name_token(*pieces[0])
        if pkey_text is None and name[:1].isdigit():
            name, pkey_text, pcol = "", name, ncol
        pkey = 0
        if pkey_text is not None:
            pkey = c_strtoul(pkey_text)
            if pkey is None or pkey > 0xFFFF:
                self.error(pcol, f"bad P_Key '{pkey_text}' (a number such as 0x8001)")
        flags, ipoib, indx0 = {}, False, False
        for piece, pc in pieces[1:]:
            flag, fcol, val, vcol = _name_token(piece, pc)
            if not flag:
                self.error(fcol, "empty partition flag between commas")
            kind = self.group_flag(flag, val, flags, fcol)
            if kind:
                continue
            if _prefix(flag, "ipoib"):
                ipoib = True
            elif _prefix(flag, "defmember"):
                choice = next((m for m in ("full", "both", "limited") if val and _prefix(val, m)), None)
                if choice is None:
                    self.warn(fcol, "flag 'defmember' needs full, limited or both; ignored")
                else:
                    self.defmember = choice
            elif flag == "indx0":
                indx0 = True
            else:
                self.warn(fcol, f"unrecognized partition flag '{flag}' ignored")
        part = self.policy._partition(name, pkey, self.lineno)
        part.ipoib |= ipoib
        part.indx0 |= indx0
        for k, v in flags.items():
            part.flags.setdefault(k, v)
        self.current = part

    def group_flag(self, flag: str, val, flags: dict, col: int) -> bool:
        for gf in _GROUP_FLAGS:
            if _prefix(flag, gf):
                num = c_strtoul(val) if val else None
                if num is None:
                    self.warn(col, f"flag '{gf}' needs a numeric value; skipped")
                elif gf == "scope":
                    flags.setdefault("scope", []).append(num)
                else:
                    flags[gf] = num
                return True
        return False

    def ports(self, text: str, col: int):
        part = self.current
        pieces = _split(text, col)
        for i, (piece, pc) in enumerate(pieces):
            name, ncol, flag, fcol = _name_token(piece, pc)
            if name == "mgid":
                self.mgroup(pieces[i:], ncol)
                return
            if not name or _prefix(name, "NONE"):
                continue
            membership = self.defmember
            if flag is not None:
                membership = next((m for m in ("full", "both", "limited") if _prefix(flag, m)), None)
                if membership is None:
                    self.warn(fcol, f"unrecognized membership '{flag}'; opensm assumes limited")
                    membership = "limited"
            who = next((kw for kw, _ in _KEYWORDS if _prefix(name, kw)), None)
            if who is None and _prefix(name, "SELF"):
                who = "SELF"
            if who is None:
                guid = c_strtoul(name)
                if not guid or guid >= 1 << 64:
                    self.error(ncol, f"bad PortGUID '{name}' (0x-prefixed hex, decimal, or ALL, ALL_CAS, "
                                     f"ALL_SWITCHES, ALL_ROUTERS, SELF)")
                who = guid
            part.members.append(Member(who, membership, self.lineno, ncol))

    def mgroup(self, pieces, col: int):
        _, _, gid, gcol = _name_token(*pieces[0])
        try:
            raw = ipaddress.IPv6Address(gid or "").packed
        except ValueError:
            raw = b""
        if not raw or raw[0] != 0xFF:
            self.warn(gcol, f"mgid '{gid}' is not a multicast GID; opensm ignores this group")
            return
        flags = dict(self.current.flags)
        for piece, pc in pieces[1:]:
            flag, fcol, val, _ = _name_token(piece, pc)
            if not self.group_flag(flag, val, flags, fcol):
                self.warn(fcol, f"unrecognized mgroup flag '{flag}' ignored")
        if raw[2:4] in (b"\x40\x1b", b"\x60\x1b"):  # IP group: P_Key bits become the partition's
            pk = self.current.pkey | FULL_BIT
            if raw[4:6] not in (b"\x00\x00", pk.to_bytes(2, "big")):
                self.warn(gcol, f"IP mgid '{gid}' carries a P_Key other than the partition's; opensm skips it")
                return
            raw = raw[:4] + pk.to_bytes(2, "big") + raw[6:]
        self.current.mgroups.append(McastGroup(str(ipaddress.IPv6Address(raw)), flags, self.lineno))


def parse_policy(text: str, path: str = "<policy>", allow_both_pkeys: bool = False) -> Policy:
    policy = Policy(path, allow_both_pkeys)
    parser = _Parser(policy)
    for raw in text.splitlines():
        parser.line(raw)
    if parser.current is not None:
        policy.warnings.append(f"{path}: partition '{parser.current.name}' is not closed with ';' at the end")
    return policy


def load_policy(path: str, allow_both_pkeys: bool = False) -> Policy:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        raise UserError(f"cannot read the policy file {path} ({e.strerror}); give opensm's partitions.conf "
                        f"with --policy") from None
    return parse_policy(text, str(path), allow_both_pkeys)
