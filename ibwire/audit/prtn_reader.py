"""opensm's partitions.conf reader, step for step (opensm 3.3.23 opensm/osm_prtn_config.c).

opensm reads the file with `fgets` into one 4096-byte line buffer, cuts it in place (`#`, `;`, `,`, `=`
become NULs) and walks it with pointer arithmetic; the lengths it adds up decide where it resumes.  The
buffer keeps the bytes of earlier, longer lines, and an `mgid=` item reads on past its own `;`.  To read
a file exactly as opensm applies it, `read()` replays those steps on a byte buffer and reports what
opensm does to a `Sink` (osm_prtn.c's partition/port calls) plus a `Note` wherever the text and what
opensm does part ways.  Numbers follow C's strtoul/strtoull with base 0 (glibc, 64-bit unsigned long).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from dissectors.numbers import IPOIB_QKEY, PKEY_BASE
from ibwire.files.inputfile import closest

LINE_SIZE = 4096  # char line[4096]; fgets(line, sizeof(line) - 1, file)
_BLANK = b" \t\n"  # STRIP_*_SPACES and parse_name_token skip these
_CSPACE = b" \t\n\v\f\r"  # isspace() in the C locale, what strtoul skips
ULONG_MAX = (1 << 64) - 1
OSM_DEFAULT_MGRP_MTU, OSM_DEFAULT_MGRP_RATE, OSM_DEFAULT_SL = 4, 3, 0
GROUP_FLAGS = ("mtu", "rate", "scope", "Q_Key", "TClass", "sl", "FlowLabel")  # parse_group_flag's order
KEYWORDS = (("ALL", None), ("ALL_CAS", "ca"), ("ALL_SWITCHES", "switch"), ("ALL_ROUTERS", "router"))


@dataclass
class Note:
    """The text and opensm part ways: `says` is the natural reading, `does` what opensm programs."""

    line: int
    says: str
    does: str
    severity: str = "warning"  # info | warning | breach (widens someone's membership)
    pkey: Optional[int] = None  # the partition the note is about, when there is one
    guid: Optional[int] = None  # the port GUID opensm read from a number written otherwise
    unknown: bool = False  # a word opensm does not know (a flag or a membership): a likely typo


class Rejected(Exception):
    """opensm's PARSE ERROR: the whole file is dropped and opensm retries with its default config."""

    def __init__(self, line: int, why: str):
        super().__init__(why)
        self.line, self.why = line, why


def strtoul(text: str):
    """C strtoul(text, &end, 0) -> (value, characters consumed); consumed 0 means no number."""
    i, n = 0, len(text)
    while i < n and text[i].encode("latin-1") in _CSPACE:
        i += 1
    neg = i < n and text[i] == "-"
    if i < n and text[i] in "+-":
        i += 1
    base = 10
    if text[i : i + 2].lower() == "0x" and i + 2 < n and text[i + 2] in "0123456789abcdefABCDEF":
        base, i = 16, i + 2
    elif text[i : i + 1] == "0":
        base = 8
    start = i
    digits = "0123456789abcdef"[:base]
    while i < n and text[i].lower() in digits:
        i += 1
    if i == start:
        return 0, 0
    value = int(text[start:i], base)
    if value > ULONG_MAX:
        value = ULONG_MAX  # ERANGE, which opensm never checks
    elif neg:
        value = (-value) & ULONG_MAX
    return value, i


def _number_reading(text: str) -> Optional[str]:
    """How C reads a number a person may read otherwise: octal, decimal without 0x, sign, overflow."""
    t = text.strip()
    body = t.lstrip("+-")
    if t[:1] == "-":
        return "negative, so C wraps it modulo 2^64"
    if t[:1] == "+":
        return "signed"
    if len(body) > 1 and body[0] == "0" and body[1] not in "xX":
        return "octal (leading 0)"
    if body[:1].isdigit() and not body.lower().startswith("0x") and body != "0":
        return "decimal (no 0x)"
    return None


class Sink:
    """What osm_prtn.c does with the reader's calls; policy.Policy implements it."""

    def make_partition(self, name: Optional[str], pkey: int, line: int):
        raise NotImplementedError

    def add_member(self, part, who, membership: str, line: int) -> None:
        raise NotImplementedError

    def add_mgroup(self, part, mgid: bytes, flags: dict, line: int) -> None:
        raise NotImplementedError


class _Conf:
    """struct part_conf: what one statement (up to its ';') has set so far."""

    def __init__(self):
        self.part = None
        self.ipoib = False
        self.flags = {
            "mtu": OSM_DEFAULT_MGRP_MTU,
            "rate": OSM_DEFAULT_MGRP_RATE,
            "sl": OSM_DEFAULT_SL,
            "scope_mask": 0,
            "Q_Key": 0,
            "TClass": 0,
            "FlowLabel": 0,
        }
        self.membership = "limited"
        self.indx0 = False
        self.full_bit = None  # header P_Key text with the 0x8000 bit, until a port is limited by default


class Reader:
    def __init__(self, sink: Sink, allow_both_pkeys: bool = False):
        self.sink = sink
        self.allow_both = allow_both_pkeys
        self.buf = bytearray(LINE_SIZE + 1)  # +1: a C read one past the array finds NUL here
        self.lineno = 0
        self.notes: list = []
        self.part = None  # partition of the statement being read

    # -- C string helpers on the line buffer -------------------------------------------------------
    def _at(self, i: int) -> int:
        return self.buf[i] if 0 <= i < len(self.buf) else 0

    def _strlen(self, i: int) -> int:
        j = i
        while self._at(j):
            j += 1
        return j - i

    def _strchr(self, i: int, ch: int) -> Optional[int]:
        while self._at(i):
            if self.buf[i] == ch:
                return i
            i += 1
        return None

    def _str(self, i: int) -> str:
        return bytes(self.buf[i : i + self._strlen(i)]).decode("latin-1")

    def _nul(self, i: int) -> None:
        if 0 <= i < len(self.buf):
            self.buf[i] = 0

    def note(
        self, says: str, does: str, severity: str = "warning", pkey: Optional[int] = None, unknown: bool = False
    ) -> None:
        """A note inside a statement is about its partition unless it names another P_Key."""
        if pkey is None and self.part is not None:
            pkey = self.part.pkey
        self.notes.append(Note(self.lineno, says, does, severity, pkey, unknown=unknown))

    def reject(self, why: str):
        raise Rejected(self.lineno, why)

    # -- osm_prtn_config_parse_file ----------------------------------------------------------------
    def read(self, data: bytes) -> bool:
        """Feed the file; False when opensm counts it as not processed (it then retries with defaults)."""
        conf, success, pos = None, 0, 0
        while pos < len(data):
            end = data.find(b"\n", pos, pos + LINE_SIZE - 2)
            chunk = data[pos : end + 1] if end >= 0 else data[pos : pos + LINE_SIZE - 2]
            pos += len(chunk)
            self.lineno += 1
            if end < 0 and pos < len(data):
                self.note(
                    f"line {self.lineno} goes on past {LINE_SIZE - 2} characters",
                    "opensm reads the rest as the next line (fgets into a 4096-byte buffer), and "
                    "its line numbers run one ahead from here",
                )
            self.buf[: len(chunk) + 1] = chunk + b"\0"
            p = 0
            q = self._strchr(0, ord("#"))
            if q is not None:
                self._nul(q)
            while True:
                while self._at(p) and self._at(p) in _BLANK:
                    p += 1
                if not self._at(p):
                    break
                if conf is None:
                    conf = _Conf()
                q = self._strchr(p, ord(";"))
                if q is not None:
                    self._nul(q)
                p += self._statement(conf, p, q)
                success = 1
                if q is None:
                    break
                conf = self.part = None
        if conf is not None and conf.part is not None:
            self.note(
                f"the last partition ('{conf.part.name}') is not closed with ';'",
                "opensm applies it as written",
                "info",
            )
        return success == 1

    def _comma_token(self, p: int):
        """The next comma ends the token (opensm: `q = strchr(p, ','); if (q) *q = '\\0';`), then
        parse_name_token: (the comma's index or None, length, name, value)."""
        q = self._strchr(p, ord(","))
        if q is not None:
            self._nul(q)
        return (q, *self._name_token(p))

    # -- parse_part_conf ---------------------------------------------------------------------------
    def _statement(self, conf: _Conf, p: int, semicolon: Optional[int]) -> int:
        start = p
        if self._at(p) in (ord("\t"), 0, ord("\n")):
            p += 1
        length = p - start
        if conf.part is None:
            first_note = len(self.notes)
            colon = self._strchr(p, ord(":"))
            if colon is None:
                self.reject("no partition definition found")
            self._nul(colon)
            after = colon + 1
            q, ret, name, pkey_text = self._comma_token(p)
            p += ret
            length += ret
            while q is not None:
                q, ret, flag, val = self._comma_token(p)
                p += ret
                length += ret
                self._partition_flag(conf, flag, val)
            if p != after or not self._create(conf, name, pkey_text):
                self.reject("bad partition definition")
            for n in self.notes[first_note:]:  # header notes are about the partition it made
                n.pkey = conf.part.pkey if n.pkey is None else n.pkey
        self.part = conf.part
        while True:
            q, ret, name, flag = self._comma_token(p)
            length += ret
            if name == "mgid":
                length += self._mgroup(conf, p + ret, flag, semicolon)
                return length
            if not self._port(conf, name, flag):
                self.reject(f"bad PortGUID '{name}'")
            p += ret
            if q is None:
                return length

    def _name_token(self, start: int):
        """parse_name_token: `name[=value]`, blanks trimmed in place -> (length consumed, name, value)."""
        p = start
        while self._at(p) and self._at(p) in _BLANK:
            p += 1
        q = self._strchr(p, ord("="))
        if q is not None:
            self._nul(q)
            q += 1
        length = self._strlen(start) + 1
        vstart = q
        e = p + self._strlen(p)
        while e != p and self._at(e) in (0, 32, 9, 10):
            self._nul(e)
            e -= 1
        name = self._str(p)
        if vstart is None:
            return length, name, None
        p = vstart
        while self._at(p) and self._at(p) in _BLANK:
            p += 1
        e = p + self._strlen(p)
        length += (e - vstart) + 1
        while e != p and self._at(e) in (0, 32, 9, 10):
            self._nul(e)
            e -= 1
        return length, name, self._str(p)

    # -- partition_create / partition_add_flag -----------------------------------------------------
    def _create(self, conf: _Conf, name: Optional[str], pkey_text: Optional[str]) -> bool:
        if pkey_text is None and name and name[0].isdigit() and name[0].isascii():
            name, pkey_text = None, name
        pkey = 0
        if pkey_text is not None:
            value, used = strtoul(pkey_text)
            if not used or used != len(pkey_text):
                return False
            pkey = value & 0xFFFF
            self._pkey_notes(pkey_text, value, pkey)
            conf.full_bit = pkey_text if pkey & 0x8000 and value <= 0xFFFF else None
        part = self.sink.make_partition(name, pkey, self.lineno)
        if part is None:
            return False
        conf.part = part
        if conf.ipoib:
            mgid = bytearray(b"\xff\x12\x40\x1b\0\0" + bytes(6) + b"\xff" * 4)
            mgid[4:6] = (part.pkey | 0x8000).to_bytes(2, "big")
            flags = dict(conf.flags, Q_Key=conf.flags["Q_Key"] or IPOIB_QKEY, scope_mask=conf.flags["scope_mask"])
            self.sink.add_mgroup(part, bytes(mgid), flags, self.lineno)
        return True

    def _pkey_notes(self, text: str, value: int, pkey: int) -> None:
        how = _number_reading(text)
        base = pkey & PKEY_BASE
        if value > 0xFFFF:
            self.note(
                f"P_Key '{text}' (= 0x{value:x})",
                f"opensm keeps the low 16 bits: partition 0x{base:04x}",
                "warning",
                base,
            )
        elif how:
            self.note(
                f"P_Key '{text}' is {how}",
                f"opensm reads 0x{value:04x}: partition 0x{base:04x}",
                "info" if how.startswith("decimal") else "warning",
                base,
            )

    def _partition_flag(self, conf: _Conf, flag: str, val: Optional[str]) -> None:
        if self._group_flag(conf.flags, flag, val):
            return
        if "ipoib".startswith(flag):
            conf.ipoib = True
        elif "defmember".startswith(flag):
            choice = None if val is None else next((m for m in ("full", "both", "limited") if m.startswith(val)), None)
            if choice is None:
                self.note(
                    f"'{flag}={val}' asks for a default membership" if val is not None else f"'{flag}' without a value",
                    "opensm skips it: ports without =full/=both are limited",
                )
            else:
                if val == "":
                    self.note(
                        f"'{flag}=' names no membership",
                        "opensm makes every port of this statement without its own flag a FULL member",
                        "breach",
                    )
                conf.membership = choice
        elif flag == "indx0":
            conf.indx0 = True
        else:
            self.note(
                f"partition flag '{flag}'",
                "opensm does not know it and ignores it" + _guess(flag, GROUP_FLAGS + ("ipoib", "defmember", "indx0")),
                unknown=True,
            )

    def _group_flag(self, flags: dict, flag: str, val: Optional[str]) -> bool:
        """parse_group_flag: True when `flag` is a (prefix of a) multicast group flag."""
        for gf in GROUP_FLAGS:
            if not gf.startswith(flag):
                continue
            if flag == "":
                self.note(
                    "an empty flag between commas", "opensm takes it for 'mtu' without a value and ignores it", "info"
                )
                return True
            value, used = strtoul(val) if val else (0, 0)
            clean = val is not None and used == len(val)
            if gf in ("sl", "FlowLabel", "scope"):
                low, high = (1, 15) if gf == "scope" else (0, 15 if gf == "sl" else 0xFFFFF)
                ok = val and used and low <= value <= high and (clean or gf == "scope" or val[used] in " \t\n\v\f\r")
                if not ok:
                    self.note(
                        f"'{flag}={val}'" if val is not None else f"'{flag}' without a value",
                        f"opensm skips flag {gf} (needs {low}..{high})",
                    )
                elif gf == "scope":
                    flags["scope_mask"] |= 1 << value
                else:
                    flags[gf] = value
                return True
            if val is None:
                self.note(f"'{flag}' without a value", f"opensm ignores flag {gf}")
            else:
                flags[gf] = value & (0xFF if gf == "TClass" else 0xFFFFFFFF)
                if not clean:
                    self.note(f"'{flag}={val}'", f"opensm takes {gf}={flags[gf]}")
            return True
        return False

    # -- partition_add_port ------------------------------------------------------------------------
    def _port(self, conf: _Conf, name: str, flag: Optional[str]) -> bool:
        if not name or "NONE".startswith(name):
            if name and name != "NONE":
                self.note(f"'{name}'", "opensm reads it as NONE (no port)")
            return True
        membership = conf.membership
        if flag is not None:
            membership = "limited"
            if "full".startswith(flag):
                membership = "full"
                if flag == "":
                    self.note(f"'{name}=' names no membership", "opensm makes it a FULL member", "breach")
            elif "both".startswith(flag):
                membership = "both"
            elif not "limited".startswith(flag):
                self.note(
                    f"'{name}={flag}'",
                    "opensm does not know the membership and makes it limited"
                    + _guess(flag, ("full", "both", "limited")),
                    unknown=True,
                )
        if flag is None and membership == "limited" and conf.full_bit:
            self.note(
                f"P_Key '{conf.full_bit}' with the full-membership bit, and '{name}' without =full",
                "opensm ignores the bit: it makes the port a limited member",
            )
            conf.full_bit = None
        if membership == "both" and not self.allow_both:
            self.note(
                f"'{name}' is a member of both kinds",
                "without --allow_both_pkeys opensm programs only the full P_Key",
                "info",
            )
        who = None
        for kw, _ in KEYWORDS:
            if kw.startswith(name):
                who = kw
                break
        if who is None and "SELF".startswith(name):
            who = "SELF"
        if who is not None:
            if who != name:
                self.note(f"'{name}'", f"opensm reads it as {who}", "warning" if who != "SELF" else "info")
        else:
            value, used = strtoul(name)
            if not value or used != len(name):
                return False
            how = _number_reading(name)
            if how:
                self.note(f"PortGUID '{name}' is {how}", f"opensm reads port 0x{value:016x}")
                self.notes[-1].guid = value
            who = value
        self.sink.add_member(conf.part, who, membership, self.lineno)
        return True

    # -- mgroup_create -----------------------------------------------------------------------------
    def _mgroup(self, conf: _Conf, p: int, mgid_text: Optional[str], semicolon: Optional[int]) -> int:
        raw = _inet_pton6(mgid_text)
        if raw is None or raw[0] != 0xFF:
            self.note(f"mgid '{mgid_text}'", "is not a multicast GID: opensm creates no group")
            return 0
        flags = {k: conf.flags[k] for k in ("mtu", "rate", "sl", "Q_Key", "FlowLabel", "scope_mask")}
        flags["TClass"] = 0
        length = 0
        while True:
            q = self._strchr(p, ord(","))
            if q is not None:
                self._nul(q)
            past = semicolon is not None and p > semicolon
            ret, flag, val = self._name_token(p)
            if flag and not self._group_flag(flags, flag, val):
                item = flag + ("" if val is None else "=" + val)
                if past:
                    self.note(
                        f"'{item}' after ';' on the line of an mgid= item",
                        "opensm reads the rest of that line as multicast group flags and ignores it",
                    )
                else:
                    self.note(
                        f"'{item}' after mgid= on the same line",
                        "opensm reads it as a multicast group flag and ignores it (an mgid item "
                        "consumes the rest of its line)",
                    )
            p += ret
            length += ret
            if q is None:
                break
        ip = raw[2:4] in (b"\x40\x1b", b"\x60\x1b")
        if ip:
            want = (conf.part.pkey | 0x8000).to_bytes(2, "big")
            broadcast = raw[:4] == b"\xff\x12\x40\x1b" and raw[6:] == bytes(6) + b"\xff" * 4 and raw[4:6] == b"\xff\xff"
            if not (broadcast or raw[4:6] in (b"\0\0", want)):
                self.note(
                    f"IP mgid '{mgid_text}' carries P_Key 0x{raw.hex()[8:12]}",
                    "opensm creates no group (it must be 0 or the partition's full P_Key)",
                )
                return length
            for k in ("rate", "mtu"):
                if flags[k] != conf.flags[k]:
                    self.note(
                        f"IP mgid '{mgid_text}' with {k}={flags[k]}",
                        f"opensm creates no group ({k} must equal the partition's {conf.flags[k]})",
                    )
                    return length
            raw = raw[:4] + want + raw[6:]
            flags["Q_Key"] = flags["Q_Key"] or IPOIB_QKEY
        self.sink.add_mgroup(conf.part, raw, flags, self.lineno)
        return length


def _guess(word: str, choices) -> str:
    """' (a misspelt 'ipoib'?)' when `word` looks like one of `choices`."""
    close = closest(word, choices)
    return f" (a misspelt '{close}'?)" if close else ""


def _inet_pton6(text: Optional[str]) -> Optional[bytes]:
    """inet_pton(AF_INET6): no zone index, no blanks."""
    if not text or "%" in text or any(c in text for c in " \t\n/"):
        return None
    try:
        return ipaddress.IPv6Address(text).packed
    except ValueError:
        return None
