"""The `-V` lines of the data structures NVMe-oF transfers carry (dissectors.nvmedata) that Wireshark's
packet-nvme.c words itself (its BASE_CUSTOM formatters: counts one more than the 0's based field, sizes in
bytes, times in ms) rather than from a field's registration, worded as tshark 4.0 words them, slips
included (`microsecond%s`, `logical block%s`)."""

from dissectors.nvmetable import GET_LOG_PAGE_OPC
from ibwire.report.packets.nvme_words import ADMIN, LOG_PAGES

C = "nvme.cmd.identify.ctrl."
P = "nvme.fabrics.prop_get.ccap."


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


def _queues(v) -> str:
    """A count of queues, 0's based: the field, then the count."""
    return f"{_n(v):x} ({_n(v) + 1})"


QUEUES = (  # Set Features Number of Queues: requested, and allocated in its completion
    "nvme.cmd.set_features.dword11.nq.nsqr",
    "nvme.cmd.set_features.dword11.nq.ncqr",
    "nvme.cqe.dword0.set_features.nq.nsqa",
    "nvme.cqe.dword0.set_features.ncqa",
)


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
    **{k: _queues for k in QUEUES},
    P + "mqes": lambda v: str(_n(v) + 1),
    P + "to": lambda v: f"{_n(v):x} ({_n(v) * 500} ms)",
    P + "dstrd": lambda v: f"0x{_n(v):x} ({4 << _n(v)} bytes)",
    P + "mpsmin": lambda v: f"0x{_n(v):x} ({4096 << _n(v)} bytes)",
    P + "mpsmax": lambda v: f"0x{_n(v):x} ({4096 << _n(v)} bytes)",
}
WHOLE = {
    C + "tnvmcap": _capacity("Total NVM Capacity (TNVMCAP)"),
    C + "unvmcap": _capacity("Unallocated NVM Capacity (UNVMCAP)"),
}
NS_VS = 384  # Identify Namespace data's vendor specific bytes
# Entries of a structure titled by their number: (offset of the first, size, title)
NUMBERED = {
    C + "psds.psd": (2048, 32, "Power State {n} Descriptor (PSD{n})"),
    "nvme.cmd.get_logpage.identify.rcrd": (1024, 1024, "Discovery Log Entry {n} (DLE{n})"),
    "nvme.cmd.identify.nslist.nsid": (0, 4, "nsid[{n}]: {v}"),
    "nvme.cmd.identify.ns.lbaf": (128, 4, "LBAF{n}: lbads {lbads} ms {ms}"),
}


class Titled(str):
    """An item's value (its -T json text) and the title -V shows instead (`{shown}`: the value as -V
    shows bytes)."""

    title = ""


def numbered(key: str, layer, offset: int, text: str) -> str:
    """`text` of `key` at `offset` of the data structure packet `layer` (dissectors.nvme.data_layer), titled
    if tshark titles it: an entry NUMBERED, a log page's bytes by the page's name, other admin data by the
    command's name and offset."""
    if layer.titles and offset in layer.titles and key == "nvme.cmd.get_logpage.cmd_and_eff.cs":
        return _titled(text, layer.titles[offset])  # numbered per packet (dissectors.nvmetable.effects_entries)
    if key == "nvme.data" and layer.opc == GET_LOG_PAGE_OPC:
        name = LOG_PAGES.get(layer.cdw10, "Reserved Page Name")
        return _titled(text, f"Nvme Data: NVMe Get Log Page ({name})")
    if key == "nvme.data":  # another admin command's data, where this packet's share starts
        return _titled(text, f"Nvme Data: {ADMIN.get(layer.opc, 'Unknown Command')}, offset {layer.at + offset}")
    if key == "nvme.cmd.identify.ns.vs":  # where in the field this packet's share starts
        return _titled(text, f"Vendor Specific: {{shown}} (offset {layer.at + offset - NS_VS})")
    if key not in NUMBERED:
        return text
    first, size, title = NUMBERED[key]
    v = int(text, 0) if text.startswith("0x") else 0
    n = (layer.at + offset - first) // size
    return _titled(text, title.format(n=n, v=v, lbads=(v >> 16) & 0xFF, ms=v & 0xFFFF))


def _titled(text: str, title: str) -> Titled:
    out = Titled(text)
    out.title = title
    return out
