"""The `-V` lines of the data structures NVMe-oF transfers carry (dissectors.nvmedata) that Wireshark's
packet-nvme.c words itself (its BASE_CUSTOM formatters: counts one more than the 0's based field, sizes in
bytes, times in ms) rather than from a field's registration, worded as tshark 4.0 words them, slips
included (`microsecond%s`, `logical block%s`)."""

C = "nvme.cmd.identify.ctrl."


def _n(v) -> int:
    return int(v, 0) if isinstance(v, str) else int(v)


def _count(noun: str, many: str = "s", one: str = ""):
    return lambda v: f"0x{_n(v):x}: ({_n(v) + 1} {noun}{many if _n(v) else one})"


def _pow2(noun: str):
    return lambda v: f"0x{_n(v):x} ({1 << _n(v)} {noun})"


def _ms(v) -> str:
    return f"{_n(v)} ({_n(v) * 100} ms)"


def _x4096(v) -> str:
    return f"0x{_n(v):x} ({_n(v) * 4096} bytes)"


def _x16(v) -> str:
    return f"{_n(v):x} ({_n(v) * 16} bytes)"


def _rtd3(v) -> str:
    n = _n(v)
    return f"{n} ({n} microsecond{'%s' if n > 1 else ''})" if n else "0 (not reported)"


def _tmt(v) -> str:
    return f"{_n(v)} degrees K" if _n(v) else "0 (not supported)"


def _mdts(v) -> str:
    return f"0x{_n(v):x} ({1 << _n(v)} pages)" if _n(v) else "0x0 (unlimited)"


def _capacity(label: str):
    """A 16-byte capacity in bytes, or in the largest binary unit it needs beyond 64 bits (no value shown)."""

    def line(v) -> str:
        n = int.from_bytes(bytes.fromhex(str(v).replace(":", "")), "little")
        if n >> 64 == 0:
            return f"{label} ({n} bytes)"
        shift, unit = next((s, u) for s, u in zip(range(10, 70, 10), "KMGTPE") if n >> 64 >> s == 0 or u == "E")
        return f"{label} ({(n >> shift) & ((1 << 64) - 1)} {unit}iB)"

    return line


WORDED = {
    C + "rab": lambda v: f"0x{_n(v):x} ({1 << _n(v)} command{'s' if _n(v) else ''})",
    C + "mdts": _mdts,
    C + "rtd3r": _rtd3,
    C + "rtd3e": _rtd3,
    **{C + k: _ms for k in ("crdt1", "crdt2", "crdt3", "mtfa", "kas")},
    C + "acl": _count("command"),
    C + "aerl": _count("event"),
    C + "elpe": _count("entr", "ies", "y"),
    C + "npss": _count("state"),
    **{C + k: _x4096 for k in ("hmpre", "hmmin", "acwu")},
    C + "mntmt": _tmt,
    C + "mxtmt": _tmt,
    **{C + k: _pow2("bytes") for k in ("sqes.mins", "sqes.maxs", "cqes.mins", "cqes.maxs")},
    **{C + k: lambda v: f"{_n(v) + 1} logical block{'%s' if _n(v) else ''}" for k in ("awun", "awupf")},
    **{C + "nvmeof." + k: _x16 for k in ("ioccsz", "iorcsz", "icdoff")},
    "nvme.cmd.get_logpage.numd": lambda v: f"{_n(v)} ({(_n(v) + 1) * 4} bytes)",
}
WHOLE = {
    C + "tnvmcap": _capacity("Total NVM Capacity (TNVMCAP)"),
    C + "unvmcap": _capacity("Unallocated NVM Capacity (UNVMCAP)"),
}
# Items titled without their bytes when they hold a tree
CONTAINERS = {"nvme.data": "Nvme Data: NVMe Get Log Page (NVMeOF Discovery)"}  # the only log page decoded
# Entries of a structure titled by their number: (offset of the first, size, title)
NUMBERED = {
    C + "psds.psd": (2048, 32, "Power State {n} Descriptor (PSD{n})"),
    "nvme.cmd.get_logpage.identify.rcrd": (1024, 1024, "Discovery Log Entry {n} (DLE{n})"),
}


class Titled(str):
    """An item's value (its -T json text) and the title -V shows instead."""

    title = ""


def numbered(key: str, offset: int, text: str) -> str:
    """`text`, titled if `key` is an entry NUMBERED (by its `offset` in the structure)."""
    if key not in NUMBERED:
        return text
    first, size, title = NUMBERED[key]
    out = Titled(text)
    out.title = title.format(n=(offset - first) // size)
    return out
