"""opensm partitions.conf: what each port's P_Key table holds once opensm has applied the file.

The text is read by prtn_reader (opensm/osm_prtn_config.c replayed step for step); this module is what
opensm 3.3.23's osm_prtn.c does with it.  Before the file, opensm creates `Default` (0x7fff) with every
port limited and the SM's port (SELF) full; statements then add ports in file order, and the last
statement naming a port decides its membership (full or limited; both kinds only with
--allow_both_pkeys).  A header without a P_Key reuses the partition of that name or takes the next free
P_Key counting from 1; a header whose P_Key already exists joins that partition whatever its name.  When
opensm rejects the file (or it holds no statement), opensm applies `Default=0x7fff : ALL=full` instead:
this Policy then holds that fallback and says so in `notes`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Optional

from dissectors.numbers import DEFAULT_PKEY_BASE, IPOIB_QKEY, PKEY_BASE, PKEY_FULL_MEMBER
from ibwire.audit.findings import Finding
from ibwire.audit.prtn_reader import KEYWORDS, Note, Reader, Rejected, Sink
from ibwire.errors import InputError
from ibwire.files.inputfile import read_bytes

NAME_MAX = 31  # osm_prtn_t.name is char[32]
DEFAULT_SCOPE = 0x2  # OSM_DEFAULT_MGRP_SCOPE: link-local
NODE_TYPES = ("ca", "switch", "router")


@dataclass
class Member:
    """One port-list item: a port GUID or a keyword (ALL, ALL_CAS, ALL_SWITCHES, ALL_ROUTERS, SELF)."""

    who: object
    membership: str  # full | limited | both
    line: int = 0


@dataclass
class McastGroup:
    mgid: str
    flags: dict
    line: int


@dataclass
class Partition:
    name: str
    pkey: int  # 15-bit base
    line: int
    automatic: bool = False  # P_Key chosen by opensm
    members: list = field(default_factory=list)
    mgroups: list = field(default_factory=list)

    @property
    def ipoib(self) -> bool:
        return any(_is_ip(g.mgid) for g in self.mgroups)


@dataclass
class Port:
    """What the policy needs to know about a port to resolve keywords."""

    guid: int
    node_type: str = "ca"
    is_sm: bool = False


def _is_ip(mgid: str) -> bool:
    return ipaddress.IPv6Address(mgid).packed[2:4] in (b"\x40\x1b", b"\x60\x1b")


class Policy(Sink):
    """partitions.conf as opensm applies it: partitions by base P_Key, members in statement order."""

    def __init__(self, path: str = "<policy>", allow_both_pkeys: bool = False, file_found: bool = True):
        self.path = path
        self.allow_both_pkeys = allow_both_pkeys
        self.partitions: dict[int, Partition] = {}
        self.notes: list[Note] = []
        self.fallback = not file_found  # True: opensm runs with its default configuration
        self.rejected: Optional[tuple] = None  # (line, why) when opensm rejected the file
        self._counter = 0
        self._index = None  # see _candidates
        default = self.make_partition("Default", DEFAULT_PKEY_BASE, 0)
        default.members = [Member("ALL", "limited" if file_found else "full"), Member("SELF", "full")]
        if not file_found:
            self.add_mgroup(
                default, b"\xff\x12\x40\x1b\xff\xff" + bytes(6) + b"\xff" * 4, {"Q_Key": IPOIB_QKEY, "scope_mask": 0}, 0
            )

    # -- queries ---------------------------------------------------------------------------------
    def membership(self, port: Port) -> dict[int, str]:
        """Base P_Key -> 'full' | 'limited' | 'both' that opensm programs for this port.  Only the partitions
        naming the port or a keyword are looked at (`_candidates`), so an audit of many tenants' ports costs
        each port its own partitions, not all of them."""
        out = {}
        for pk in self._candidates(port.guid):
            part = self.partitions[pk]
            full = limited = False
            for mem in part.members:
                if not _applies(mem.who, port):
                    continue
                m = mem.membership
                if not self.allow_both_pkeys:  # osm_prtn_add_port drops the port from both maps
                    full, limited = m != "limited", m == "limited"
                else:  # manage_membership_change, then the adds
                    full = (full and m != "limited") or m != "limited"
                    limited = (limited and m != "full") or m in ("limited", "both")
            if full or limited:
                out[pk] = "both" if full and limited else "full" if full else "limited"
        return out

    def _candidates(self, guid: int) -> list:
        """The base P_Keys, in file order, of the partitions with a member naming `guid` or a keyword; the
        index is rebuilt after the policy changes (make_partition, add_member)."""
        if self._index is None:
            by_guid: dict = {}
            keyword = []
            for order, (pk, part) in enumerate(self.partitions.items()):
                for mem in part.members:
                    if isinstance(mem.who, str):
                        keyword.append((order, pk))
                    else:
                        by_guid.setdefault(mem.who, []).append((order, pk))
            self._index = (by_guid, keyword)
        by_guid, keyword = self._index
        return [pk for _, pk in sorted(set(keyword + by_guid.get(guid, [])))]

    def expected_table(self, port: Port) -> set[int]:
        """The 16-bit P_Key entries (membership bit included) opensm writes into this port's table."""
        keys = set()
        for pk, m in self.membership(port).items():
            if m in ("full", "both"):
                keys.add(pk | PKEY_FULL_MEMBER)
            if m in ("limited", "both"):
                keys.add(pk)
        return keys

    def declared(self, pkey: int) -> bool:
        return (pkey & PKEY_BASE) in self.partitions

    def name_of(self, pkey: int) -> str:
        p = self.partitions.get(pkey & PKEY_BASE)
        return p.name if p else "undeclared"

    def ipoib_mgids(self) -> dict[str, int]:
        """MGID (text) of every IP-over-IB group opensm creates -> base P_Key."""
        return {g.mgid: pk for pk, p in self.partitions.items() for g in p.mgroups if _is_ip(g.mgid)}

    @property
    def warnings(self) -> list[str]:
        return [f"{self.path}:{n.line}: {n.says}: {n.does}" for n in self.notes]

    # -- osm_prtn.c ------------------------------------------------------------------------------
    def make_partition(self, name: Optional[str], pkey: int, line: int):
        """osm_prtn_make_new: None when opensm runs out of automatic P_Keys (a parse error)."""
        pkey &= PKEY_BASE
        automatic = False
        if not pkey:
            if name is not None:
                found = self._by_name(name)
                if found is not None:
                    return found
                lost = len(name.encode("latin-1")) > NAME_MAX and self._by_name(name[:NAME_MAX]) is not None
            while self._counter < DEFAULT_PKEY_BASE - 1:
                self._counter += 1
                if self._counter not in self.partitions:
                    pkey = self._counter
                    break
            if not pkey:
                return None
            automatic = True
            if name is not None and lost:
                self.notes.append(
                    Note(
                        line,
                        f"'{name}' names an earlier partition",
                        f"opensm keeps only {NAME_MAX} characters of a name, cannot find it "
                        f"and creates another partition, 0x{pkey:04x}",
                        "warning",
                        pkey,
                    )
                )
        stored = name.encode("latin-1")[:NAME_MAX].decode("latin-1") if name else f"{pkey:04x}"
        existing = self.partitions.get(pkey)
        if existing is not None:
            if stored != existing.name:
                was = (
                    "opensm's built-in default partition (every port limited, the SM full)"
                    if existing.line == 0
                    else f"'{existing.name}' (line {existing.line}"
                    + (", P_Key chosen by opensm)" if existing.automatic else ")")
                )
                self.notes.append(
                    Note(
                        line,
                        f"partition '{stored}' = 0x{pkey:04x} is a partition of its own",
                        f"opensm merges it into {was}: its ports and that partition's ports share P_Key 0x{pkey:04x}",
                        "breach",
                        pkey,
                    )
                )
            return existing
        part = self.partitions[pkey] = Partition(stored, pkey, line, automatic)
        self._index = None
        return part

    def _by_name(self, name: str) -> Optional[Partition]:
        """osm_prtn_find_by_name walks the partitions in cl_qmap order: the key is the big-endian P_Key
        read as a host integer, i.e. low byte first."""
        for pk in sorted(self.partitions, key=lambda k: ((k & 0xFF) << 8) | (k >> 8)):
            if self.partitions[pk].name == name:
                return self.partitions[pk]
        return None

    def add_member(self, part, who, membership: str, line: int) -> None:
        part.members.append(Member(who, membership, line))
        self._index = None

    def add_mgroup(self, part, mgid: bytes, flags: dict, line: int) -> None:
        """__create_mgrp: one group per scope bit (link-local without one), the scope written into the MGID."""
        scopes = [s for s in range(16) if flags.get("scope_mask", 0) >> s & 1] or [DEFAULT_SCOPE]
        for scope in scopes:
            raw = bytes([mgid[0], (mgid[1] & 0xF0) | scope]) + mgid[2:]
            text = str(ipaddress.IPv6Address(raw))
            if not any(g.mgid == text for g in part.mgroups):
                part.mgroups.append(McastGroup(text, dict(flags), line))


def _applies(who, port: Port) -> bool:
    if who == "ALL":
        return True
    if who == "SELF":
        return port.is_sm
    if isinstance(who, str):
        return port.node_type == dict(KEYWORDS)[who]
    return who == port.guid


def policy_findings(policy: Policy, ports=()) -> list:
    """policy-reading: the text and what opensm programs part ways; policy-fallback: opensm dropped the file.
    `ports`: port GUIDs known in the fabric; a GUID read otherwise than written that is one of them is a
    port the text did not seem to name, now a member: a breach."""
    out = []
    for n in policy.notes:
        rule = "policy-fallback" if policy.fallback else "policy-reading"
        where = f"{policy.path}:{n.line}" if n.line else policy.path
        text = f"{n.says}; {n.does}" if policy.fallback else f"the text says {n.says}; {n.does}"
        severity = n.severity
        if n.guid is not None and n.guid in ports:
            severity, text = "breach", text + ", a port of this fabric, which becomes a member"
        out.append(
            Finding(
                rule,
                severity,
                f"{where}: {text}",
                line=n.line or None,
                pkey=0xFFFF if policy.fallback else n.pkey,
                port=n.guid,
            )
        )
    return out


def parse_policy(text, path: str = "<policy>", allow_both_pkeys: bool = False) -> Policy:
    """Apply partitions.conf text (str or bytes) the way opensm 3.3.23 does."""
    data = text.encode("latin-1", "replace") if isinstance(text, str) else bytes(text)
    policy = Policy(path, allow_both_pkeys)
    reader = Reader(policy, allow_both_pkeys)
    try:
        processed = reader.read(data)
        why, line = "the file holds no partition statement", 0
    except Rejected as r:
        processed, why, line = False, f"PARSE ERROR: line {r.line}: {r.why}", r.line
        cause = [n for n in reader.notes if n.line in (r.line, r.line - 1) and n.severity != "info"]
        if b"\r\n" in data:
            why += " (the file has CRLF line ends: opensm takes each carriage return for text)"
        elif cause:
            why += f" (line {cause[-1].line}: {cause[-1].says}: {cause[-1].does})"
    if processed:
        policy.notes += reader.notes
        return policy
    fallback = Policy(path, allow_both_pkeys, file_found=False)
    fallback.notes.append(
        Note(
            line,
            f"{why}",
            "opensm drops the whole file ('Partition configuration in error; "
            "retrying with default config') and programs Default=0x7fff : "
            "ALL=full, so every port is a FULL member of 0xffff and can "
            "reach every other",
            "breach",
        )
    )
    fallback.rejected = (line, why) if line else None
    return fallback


def load_policy(path: str, allow_both_pkeys: bool = False, as_opensm: bool = False) -> Policy:
    """Read partitions.conf.  A word opensm does not know (a partition flag, a membership) is most likely a
    typo, and opensm silently ignores it: an error at its line unless `as_opensm`, which audits what opensm
    programs from the file as written (the word then stays a policy-reading finding)."""
    data = read_bytes(path, "policy file", "give opensm's partitions.conf with --policy")
    policy = parse_policy(data, str(path), allow_both_pkeys)
    unknown = [n for n in policy.notes if n.unknown]
    if unknown and not as_opensm:
        n = unknown[0]
        raise InputError(
            str(path),
            n.line,
            f"{n.says}: {n.does}; correct the word, or give --as-opensm to audit "
            "what opensm programs from the file as it is",
        )
    return policy
