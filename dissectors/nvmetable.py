"""NVMe over Fabrics on RDMA as tables (NVMe-oF 1.1 §7.3 capsules and the RDMA transport binding; NVMe
Base 2.0 §4.2 submission and §4.6 completion queue entries), named as Wireshark 4.4 names them (`nvme.*`,
`nvme-rdma.*`, packet-nvme.c and packet-nvme-rdma.c), without scapy: the layers (dissectors.nvme) and the
bulk path (ibwire.analyze.storage) both read these rows.

A row is (key, offset, size, mask); a row with a mask shows bits of the whole-byte row at the same offset,
as Wireshark shows them.  All integers are little-endian.  DISPLAY says how tshark prints each key (as
ibwire.decode.fieldtypes.TSHARK_DISPLAY: -1 bytes, 0 decimal, 1 boolean, n hexadecimal with n digits).
"""

from typing import NamedTuple

from dissectors import nvmedata
from dissectors.numbers import NVME_PORT

SQE_LEN, CQE_LEN = 64, 16
FABRICS_OPC = 0x7F
SID_ULP_TCP_MASK, SID_ULP_TCP = 0xFFFF0000, 0x01060000  # RDMA-CM IP service IDs over TCP port space


class Row(NamedTuple):
    key: str  # Wireshark's name
    off: int
    size: int
    mask: int = 0  # bits of the row at the same offset (0: the whole bytes)


def _rows(*specs):
    return tuple(Row(*s) for s in specs)


def _entries(rows, first: int, size: int, indices):
    """`rows` repeated for each entry index, the entries `size` bytes apart from offset `first` on."""
    return tuple(r._replace(off=r.off + first + size * k) for k in indices for r in rows)


SGL = _rows(
    ("nvme.cmd.sgl1.addr", 24, 8),
    ("nvme.cmd.sgl1.len", 32, 3),
    ("nvme.cmd.sgl1.key", 35, 4),
    ("nvme.cmd.sgl.type", 39, 1, 0xF0),
    ("nvme.cmd.sgl.subtype", 39, 1, 0x0F),
)
SQE_HEAD = (
    _rows(
        ("nvme.cmd.opc", 0, 1),
        ("nvme.cmd.fuse_op", 1, 1, 0x03),
        ("nvme.cmd.rsvd", 1, 1, 0x3C),
        ("nvme.cmd.psdt", 1, 1, 0xC0),
        ("nvme.cmd.cid", 2, 2),
        ("nvme.cmd.nsid", 4, 4),
        ("nvme.cmd.rsvd1", 8, 8),
        ("nvme.cmd.mptr", 16, 8),
    )
    + SGL
)
DWORDS = {n: Row(f"nvme.cmd.dword{n}", 40 + 4 * (n - 10), 4) for n in range(10, 16)}

# Admin (queue 0) and I/O commands by opcode, bytes 40-63 (dwords 10-15).
IDENTIFY = _rows(
    ("nvme.cmd.identify.dword10", 40, 4),
    ("nvme.cmd.identify.dword10.cns", 40, 4, 0xFF),
    ("nvme.cmd.identify.dword10.rsvd", 40, 4, 0xFF00),
    ("nvme.cmd.identify.dword10.cntid", 40, 4, 0xFFFF0000),
    ("nvme.cmd.identify.dword11", 44, 4),
    ("nvme.cmd.identify.dwrod11.nvmesetid", 44, 4, 0xFFFF),
    ("nvme.cmd.identify.dword11.rsvd", 44, 4, 0xFFFF0000),
    DWORDS[12],
    DWORDS[13],
    ("nvme.cmd.identify.dword14", 56, 4),
    ("nvme.cmd.identify.dword14.uuid_index", 56, 4, 0x7F),
    ("nvme.cmd.identify.dword14.rsvd", 56, 4, 0xFFFFFF80),
    DWORDS[15],
)
GET_LOG_PAGE = _rows(
    ("nvme.cmd.get_logpage.dword10", 40, 4),
    ("nvme.cmd.get_logpage.dword10.id", 40, 4, 0xFF),
    ("nvme.cmd.get_logpage.dword10.lsp", 40, 4, 0x1F00),
    ("nvme.cmd.get_logpage.dword10.rsvd", 40, 4, 0x6000),
    ("nvme.cmd.get_logpage.dword10.rae", 40, 4, 0x8000),
    ("nvme.cmd.get_logpage.dword10.numdl", 40, 4, 0xFFFF0000),
    ("nvme.cmd.get_logpage.numd", 42, 4),  # NUMDL and NUMDU, the 0's based dword count, as one value
    ("nvme.cmd.get_logpage.dword11", 44, 4),
    ("nvme.cmd.get_logpage.dword11.numdu", 44, 4, 0xFFFF),
    ("nvme.cmd.get_logpage.dword11.lsi", 44, 4, 0xFFFF0000),
    ("nvme.cmd.get_logpage.lpo", 48, 8),  # dwords 12-13; Wireshark shows dword13 too, after it
    DWORDS[13],
    ("nvme.cmd.get_logpage.dword14", 56, 4),
    ("nvme.cmd.identify.get_logpage.dword14.uuid_index", 56, 4, 0x7F),
    ("nvme.cmd.identify.get_logpage.dword14.rsvd", 56, 4, 0xFFFFFF80),
    DWORDS[15],
)
READ_WRITE = _rows(
    ("nvme.cmd.slba", 40, 8),
    ("nvme.cmd.nlb", 48, 2),
    ("nvme.cmd.rsvd2", 50, 2, 0x03FF),
    ("nvme.cmd.prinfo", 50, 2, 0x3C00),
    ("nvme.cmd.prinfo.lbrtag", 50, 2, 0x0400),  # PRCHK's bits and PRACT, as packet-nvme.c registers them
    ("nvme.cmd.prinfo.apptag", 50, 2, 1 << 11),
    ("nvme.cmd.prinfo.guard", 50, 2, 0x1000),
    ("nvme.cmd.prinfo.action", 50, 2, 0x2000),
    ("nvme.cmd.fua", 50, 2, 0x4000),
    ("nvme.cmd.lr", 50, 2, 0x8000),
    ("nvme.cmd.eilbrt", 56, 4),
    ("nvme.cmd.elbat", 60, 2),
    ("nvme.cmd.elbatm", 62, 2),
    ("nvme.cmd.dsm.access_freq", 52, 1, 0x0F),  # after the tags, as packet-nvme.c adds them (DSM Flags)
    ("nvme.cmd.dsm.access_lat", 52, 1, 0x30),
    ("nvme.cmd.dsm.seq_req", 52, 1, 0x40),
    ("nvme.cmd.dsm.incompressible", 52, 1, 0x80),
    ("nvme.cmd.rsvd3", 53, 3),
)
_SF = "nvme.cmd.set_features."
SET_FEATURES_HEAD = _rows(
    (_SF + "dword10", 40, 4),
    (_SF + "dword10.fid", 40, 4, 0xFF),
    (_SF + "dword10.rsvd", 40, 4, 0x7FFFFF00),
    (_SF + "dword10.sv", 40, 4, 0x80000000),
)
SET_FEATURES_TAIL = (DWORDS[12], DWORDS[13]) + _rows(
    (_SF + "dword14", 56, 4),
    (_SF + "dword14.uuid", 56, 4, 0x7F),
    (_SF + "dword14.rsvd", 56, 4, 0xFFFFFF80),
    DWORDS[15],
)
# Dword 11 of Set Features by feature identifier (Base 2.0 §5.27.1): Number of Queues, Asynchronous Event
# Configuration; a completion's dword 0 for Number of Queues
FEATURES = {
    0x07: _rows(
        (_SF + "dword11.nq", 44, 4),
        (_SF + "dword11.nq.nsqr", 44, 4, 0xFFFF),
        (_SF + "dword11.nq.ncqr", 44, 4, 0xFFFF0000),
    ),
    0x0B: _rows(
        (_SF + "dword11.aec", 44, 4),
        (_SF + "dword11.aec.smart", 44, 4, 0xFF),
        (_SF + "dword11.aec.ns", 44, 4, 0x100),
        (_SF + "dword11.aec.fwa", 44, 4, 0x200),
        (_SF + "dword11.aec.tel", 44, 4, 0x400),
        (_SF + "dword11.aec.ana", 44, 4, 1 << 11),
        (_SF + "dword11.aec.plat", 44, 4, 0x1000),
        (_SF + "dword11.aec.lba", 44, 4, 0x2000),
        (_SF + "dword11.aec.eg", 44, 4, 0x4000),
        (_SF + "dword11.aec.rsvd", 44, 4, 0x7FFF8000),
        (_SF + "dword11.aec.disc", 44, 4, 0x80000000),
    ),
}
FEATURE_NQ, SET_FEATURES_OPC = 0x07, 0x09
GENERIC = tuple(DWORDS.values())
ADMIN = {0x06: ("Identify", IDENTIFY), 0x02: ("Get Log Page", GET_LOG_PAGE)}
ADMIN_NAMES = {
    0x00: "Delete I/O SQ",
    0x01: "Create I/O SQ",
    0x04: "Delete I/O CQ",
    0x05: "Create I/O CQ",
    0x08: "Abort",
    0x09: "Set Features",
    0x0A: "Get Features",
    0x0C: "Async Event Request",
    0x18: "Keep Alive",
}
IO = {0x01: ("Write", READ_WRITE), 0x02: ("Read", READ_WRITE)}
IO_NAMES = {
    0x00: "Flush",
    0x04: "Write Uncorrectable",
    0x05: "Compare",
    0x08: "Write Zeroes",
    0x09: "Dataset Management",
}

# Fabrics commands (NVMe-oF 1.1 §3.3-3.5), by fctype.
FABRICS_HEAD = _rows(
    ("nvme.fabrics.cmd.opc", 0, 1),
    ("nvme.fabrics.cmd.rsvd", 1, 1),
    ("nvme.fabrics.cmd.cid", 2, 2),
    ("nvme.fabrics.cmd.fctype", 4, 1),
)
CONNECT = (
    _rows(("nvme.fabrics.cmd.connect.rsvd1", 5, 19))
    + SGL
    + _rows(
        ("nvme.fabrics.cmd.connect.recfmt", 40, 2),
        ("nvme.fabrics.cmd.connect.qid", 42, 2),
        ("nvme.fabrics.cmd.connect.sqsize", 44, 2),
        ("nvme.fabrics.cmd.connect.cattr", 46, 1),
        ("nvme.fabrics.cmd.connect.cattr.pc", 46, 1, 0x03),
        ("nvme.fabrics.cmd.connect.cattr.dfc", 46, 1, 0x04),
        ("nvme.fabrics.cmd.connect.cattr.dioq", 46, 1, 0x08),
        ("nvme.fabrics.cmd.connect.cattr.rsvd", 46, 1, 0xF0),
        ("nvme.fabrics.cmd.connect.rsvd2", 47, 1),
        ("nvme.fabrics.cmd.connect.kato", 48, 4),
        ("nvme.fabrics.cmd.connect.rsvd3", 52, 12),
    )
)
_PROP = _rows(
    ("nvme.fabrics.cmd.prop_get_set.rsvd0", 5, 35),
    ("nvme.fabrics.cmd.prop_get_set.attrib", 40, 1),
    ("nvme.fabrics.cmd.prop_get_set.attrib.size", 40, 1, 0x07),
    ("nvme.fabrics.cmd.prop_get_set.attrib.rsvd", 40, 1, 0xF8),
    ("nvme.fabrics.cmd.prop_get_set.rsvd1", 41, 3),
    ("nvme.fabrics.cmd.prop_get_set.offset", 44, 4),
)
PROP_GET = _PROP + _rows(("nvme.fabrics.cmd.prop_get.rsvd2", 48, 16))
PROP_SET = _PROP + _rows(("nvme.fabrics.prop_get_set.data", 48, 8), ("nvme.fabrics.cmd.prop_set.rsvd", 56, 8))
AUTH = (
    _rows(("nvme.fabrics.cmd.auth.rsvd1", 5, 19))
    + SGL
    + _rows(
        ("nvme.fabrics.cmd.auth.rsvd2", 40, 1),
        ("nvme.fabrics.cmd.auth.spsp0", 41, 1),
        ("nvme.fabrics.cmd.auth.spsp1", 42, 1),
        ("nvme.fabrics.cmd.auth.secp", 43, 1),
        ("nvme.fabrics.cmd.auth.al", 44, 4),
        ("nvme.fabrics.cmd.auth.rsvd3", 48, 16),
    )
)
# Controller properties a Property Get/Set carries (NVMe Base 2.0 §3.1.4), by property offset; the value's
# offsets are relative to where it sits (byte 48 of a Property Set, byte 0 of a Property Get completion).
_P = "nvme.fabrics.prop_get_set."
_GET = "nvme.fabrics.prop_get."
PROPERTIES = {
    0x00: _rows(*((_GET + n, off, size, mask) for n, off, size, mask, _ in nvmedata.CAP)),
    0x08: _rows(*((_GET + n, off, size, mask) for n, off, size, mask, _ in nvmedata.VS), (_P + "data.rsvd", 4, 4)),
    0x14: _rows(
        (_P + "cc", 0, 4),
        (_P + "cc.en", 0, 4, 0x1),
        (_P + "cc.rsvd0", 0, 4, 0xE),
        (_P + "cc.css", 0, 4, 0x70),
        (_P + "cc.mps", 0, 4, 0x780),
        (_P + "cc.ams", 0, 4, 0x3800),
        (_P + "cc.shn", 0, 4, 0xC000),
        (_P + "cc.iosqes", 0, 4, 0xF0000),
        (_P + "cc.iocqes", 0, 4, 0xF00000),
        (_P + "cc.rsvd1", 0, 4, 0xFF000000),
        (_P + "data.rsvd", 4, 4),
    ),
    0x1C: _rows(
        (_P + "csts", 0, 4),
        (_P + "csts.rdy", 0, 4, 0x1),
        (_P + "csts.cfs", 0, 4, 0x2),
        (_P + "csts.shst", 0, 4, 0xC),
        (_P + "csts.nssro", 0, 4, 0x10),
        (_P + "csts.pp", 0, 4, 0x20),
        (_P + "csts.rsvd", 0, 4, 0xFFFFFFC0),
        (_P + "data.rsvd", 4, 4),
    ),
}


def property_rows(sqe: bytes, at: int):
    """The rows of the property value a Property Get/Set command `sqe` names, placed at byte `at`."""
    rows = PROPERTIES.get(int.from_bytes(sqe[44:48], "little"), ())
    return tuple(r._replace(off=r.off + at) for r in rows)


FABRICS = {
    0x00: ("Property Set", PROP_SET),
    0x01: ("Connect", CONNECT),
    0x04: ("Property Get", PROP_GET),
    0x05: ("Authentication Send", AUTH),
    0x06: ("Authentication Receive", AUTH),
}


# Completions (16 bytes): command-specific dwords 0-1, then what every completion has.
def _cqe_tail(phase: str):
    """Bytes 8-15 of every completion; Wireshark names the phase bit `rsvd` in a fabrics completion."""
    return _rows(
        ("nvme.cqe.sqhd", 8, 2),
        ("nvme.cqe.sqid", 10, 2),
        ("nvme.cqe.cid", 12, 2),
        ("nvme.cqe.status", 14, 2),
        (f"nvme.cqe.status.{phase}", 14, 2, 0x0001),
        ("nvme.cqe.status.sc", 14, 2, 0x01FE),
        ("nvme.cqe.status.sct", 14, 2, 0x0E00),
        ("nvme.cqe.status.crd", 14, 2, 0x3000),
        ("nvme.cqe.status.m", 14, 2, 0x4000),
        ("nvme.cqe.status.dnr", 14, 2, 0x8000),
    )


CQE = _rows(("nvme.cqe.dword0", 0, 4), ("nvme.cqe.dword1", 4, 4)) + _cqe_tail("p")
CQE_NUMBER_OF_QUEUES = _rows(
    ("nvme.cqe.dword0.set_features.nq", 0, 4),
    ("nvme.cqe.dword0.set_features.nq.nsqa", 0, 4, 0xFFFF),  # submission and completion queues allocated
    ("nvme.cqe.dword0.set_features.ncqa", 0, 4, 0xFFFF0000),
    ("nvme.cqe.dword1", 4, 4),
) + _cqe_tail("p")
CQE_CONNECT = _rows(
    ("nvme.fabrics.cqe.connect.cntrlid", 0, 2),
    ("nvme.fabrics.cqe.connect.authreq", 2, 2),
    ("nvme.fabrics.cqe.connect.rsvd", 4, 4),
) + _cqe_tail("rsvd")
CQE_PROP_GET = _rows(("nvme.fabrics.prop_get_set.data", 0, 8)) + _cqe_tail("rsvd")
CQE_PROP_SET = _rows(("nvme.fabrics.cqe.prop_set.rsvd", 0, 8)) + _cqe_tail("rsvd")

# RDMA-CM private data of NVMe-oF queues (NVMe-oF 1.1 §7.3.3), in the consumer bytes of REQ/REP/REJ.
CM_REQ = _rows(
    ("nvme-rdma.cm.req.recfmt", 0, 2),
    ("nvme-rdma.cm.req.qid", 2, 2),
    ("nvme-rdma.cm.req.hrqsize", 4, 2),
    ("nvme-rdma.cm.req.hsqsize", 6, 2),
    ("nvme-rdma.cm.req.cntlid", 8, 2),
    ("nvme-rdma.cm.req.reserved", 10, 22),
)
CM_REP = _rows(
    ("nvme-rdma.cm.rsp.recfmt", 0, 2), ("nvme-rdma.cm.rsp.crqsize", 2, 2), ("nvme-rdma.cm.rsp.reserved", 4, 28)
)
CM_REJ = _rows(("nvme-rdma.cm.rej.recfmt", 0, 2), ("nvme-rdma.cm.rej.status", 2, 2))

STATUS_GENERIC = {
    0x00: "Successful Completion",
    0x01: "Invalid Command Opcode",
    0x02: "Invalid Field in Command",
    0x03: "Command ID Conflict",
    0x04: "Data Transfer Error",
    0x06: "Internal Error",
    0x07: "Command Abort Requested",
    0x0B: "Invalid Namespace or Format",
    0x80: "LBA Out of Range",
    0x81: "Capacity Exceeded",
    0x82: "Namespace Not Ready",
}


def value(row: Row, data: bytes):
    """A row's value in `data`: an int, bytes for what Wireshark shows as bytes, text for its strings."""
    raw = data[row.off : row.off + row.size]
    shown = DISPLAY.get(row.key)
    if shown == -1:
        return raw
    if row.key in STRINGS:
        return raw.split(b"\0", 1)[0].decode("ascii", "replace")
    v = int.from_bytes(raw, "little")
    if row.mask:
        v = (v & row.mask) >> ((row.mask & -row.mask).bit_length() - 1)
    return 1 if shown == 1 and v else v + 1 if row.key in ZERO_BASED else v


# Counts the SQE holds 0-based (NLB 7 is 8 blocks) that Wireshark 4.4 stores absolute: packet-nvme.c adds 1, so
# tshark shows and filters `nvme.cmd.nlb == 8` for a Read of 8 blocks (checked on the rxe lab's kernel I/O).
ZERO_BASED = frozenset({"nvme.cmd.nlb"})


def command_kind(sqe: bytes, qid: int = 0):
    """(name, rows) of a command capsule's SQE: fabrics by fctype, admin (queue 0) or I/O by opcode."""
    opc = sqe[0]
    if opc == FABRICS_OPC:
        name, rows = FABRICS.get(sqe[4], (f"Fabrics 0x{sqe[4]:02x}", ()))
        return name, FABRICS_HEAD + rows + (property_rows(sqe, 48) if sqe[4] == 0x00 else ())
    if qid == 0 and opc == SET_FEATURES_OPC:  # dword 11 by feature identifier
        return "Set Features", SQE_HEAD + SET_FEATURES_HEAD + FEATURES.get(sqe[40], (DWORDS[11],)) + SET_FEATURES_TAIL
    table, names = (ADMIN, ADMIN_NAMES) if qid == 0 else (IO, IO_NAMES)
    name, rows = table.get(opc, (names.get(opc, f"opcode 0x{opc:02x}"), GENERIC))
    return name, SQE_HEAD + rows


def completion_rows(cmd_sqe: bytes, qid=None):
    """The rows of the completion of the command whose SQE is `cmd_sqe` on queue `qid` (None: generic NVMe)."""
    if cmd_sqe is not None and cmd_sqe[0] == FABRICS_OPC:
        if cmd_sqe[4] == 0x04:
            return CQE_PROP_GET + property_rows(cmd_sqe, 0)
        return {0x01: CQE_CONNECT, 0x00: CQE_PROP_SET}.get(cmd_sqe[4], CQE)
    if qid == 0 and cmd_sqe[0] == SET_FEATURES_OPC and cmd_sqe[40] == FEATURE_NQ:
        return CQE_NUMBER_OF_QUEUES
    return CQE


# The data structures transfers carry (dissectors.nvmedata), by the command that asks for them.
IDENTIFY_OPC, GET_LOG_PAGE_OPC, CONNECT_FCTYPE = 0x06, 0x02, 0x01
FEATURES_OPC = (SET_FEATURES_OPC, 0x0A)  # their data: structures per feature, which ibwire does not decode
CNS_NS, CNS_CTRL, CNS_NS_LIST, LID_SMART, LID_EFFECTS, LID_DISCOVERY = 0x00, 0x01, 0x02, 0x02, 0x05, 0x70
_STRUCTURES = {
    "ctrl": ("nvme.cmd.identify.ctrl.", nvmedata.IDENTIFY_CTRL),
    "psd": ("nvme.cmd.identify.ctrl.psds.", nvmedata.POWER_STATE),
    "ns": ("nvme.cmd.identify.ns.", nvmedata.IDENTIFY_NS),
    "lbaf": ("nvme.cmd.identify.ns.", nvmedata.LBA_FORMAT),
    "ns_tail": ("nvme.cmd.identify.ns.", nvmedata.IDENTIFY_NS_TAIL),
    "ns_list": ("nvme.cmd.identify.nslist.", nvmedata.NS_LIST),
    "smart": ("nvme.cmd.get_logpage.smart.", nvmedata.SMART),
    "effects": ("nvme.cmd.get_logpage.cmd_and_eff.", nvmedata.EFFECTS_ENTRY),
    "log": ("nvme.cmd.get_logpage.identify.", nvmedata.DISCOVERY_HEAD),
    "entry": ("nvme.cmd.get_logpage.identify.rcrd", nvmedata.DISCOVERY_ENTRY),
    "connect": ("nvme.fabrics.cmd.connect.data.", nvmedata.CONNECT_DATA),
    "cap": ("nvme.fabrics.prop_get.", nvmedata.CAP),
    "vs": ("nvme.fabrics.prop_get.", nvmedata.VS),
}
_R = {
    name: _rows(*((prefix + n, off, size, mask) for n, off, size, mask, _ in rows))
    for name, (prefix, rows) in _STRUCTURES.items()
}
_AFTER_PSDS = next(i for i, r in enumerate(_R["ctrl"]) if r.key.endswith(".psds")) + 1
IDENTIFY_CTRL = (  # the power state descriptors inside `psds`, each in turn
    _R["ctrl"][:_AFTER_PSDS]
    + _entries(_R["psd"], nvmedata.PSD_AT, nvmedata.PSD_LEN, range(nvmedata.PSD_COUNT))
    + _R["ctrl"][_AFTER_PSDS:]
)
CONNECT_DATA, DISCOVERY_HEAD, DISCOVERY_ENTRY, SMART = _R["connect"], _R["log"], _R["entry"], _R["smart"]
STRINGS = frozenset(prefix + r[0] for prefix, rows in _STRUCTURES.values() for r in rows if r[4] == "s")
CLIPPED = frozenset("nvme.cmd.identify.ns." + name for name in nvmedata.CLIPPED)


def data_rows(sqe: bytes, qid, at: int, data: bytes):
    """The rows of `data`, the bytes at offset `at` of what the command `sqe` (on queue `qid`) moved, placed
    at 0: the structure's rows that lie wholly in them (or, CLIPPED, as far as they hold it), each entry of
    repeated ones (power state descriptors, LBA formats, namespace IDs, discovery log records); the bytes of
    any log page, and of other admin commands but Set/Get Features, as nvme.data; () for data Wireshark shows
    as bytes only."""
    n = len(data)
    if sqe[0] == FABRICS_OPC:
        return _window(CONNECT_DATA if sqe[4] == CONNECT_FCTYPE else (), at, n)
    if qid != 0 or sqe[0] in FEATURES_OPC:
        return ()
    if sqe[0] not in (IDENTIFY_OPC, GET_LOG_PAGE_OPC):  # Security Send/Receive, Firmware Image Download …
        return (Row("nvme.data", 0, n),)
    if sqe[0] == IDENTIFY_OPC:
        return _window(_identify(sqe[40], at, data), at, n)
    if sqe[40] == LID_EFFECTS:
        return (Row("nvme.data", 0, n),) + tuple(
            r._replace(off=r.off + poff) for poff, _ in effects_entries(sqe, at, n)[0] for r in _R["effects"]
        )
    if sqe[40] == LID_DISCOVERY:
        entries = range(max(0, at // nvmedata.ENTRY_LEN - 1), (at + n) // nvmedata.ENTRY_LEN)
        log = DISCOVERY_HEAD + _entries(DISCOVERY_ENTRY, nvmedata.ENTRY_LEN, nvmedata.ENTRY_LEN, entries)
    else:
        log = SMART if sqe[40] == LID_SMART else ()
    return (Row("nvme.data", 0, n),) + _window(log, at, n)


EFFECTS_END = 4096  # Wireshark decodes no entry of a page read from this log page offset on


def effects_entries(sqe: bytes, at: int, n: int):
    """The entries of a Commands Supported and Effects log page that Wireshark 4.4 shows in the `n` bytes at
    offset `at` of the transfer of Get Log Page `sqe` (packet-nvme.c, dissect_nvme_get_logpage_cmd_sup_and_eff_resp,
    reproduced with its slips): ([(offset in the packet, title)], cut).  Admin entries from the page offset on
    while it is at most 1024, titled by their index and `ACS` one more than the first's; then as many I/O entries
    as the packet has dwords left (at most 256), read from byte 1028 of the page (the specification's 1024 holds
    the I/O opcode 0 entry).  `cut`: the I/O entries ran past the packet, where Wireshark stops with an
    exception (and, in its RDMA dissector, counts none of the packet's bytes into the transfer's offset)."""
    lpo = int.from_bytes(sqe[48:56], "little") & ~3  # Wireshark clears the low bits, as a target must
    if lpo >= EFFECTS_END:
        return [], False
    off = (lpo + at) & 0xFFFFFFFF
    step, half, out, admin = nvmedata.EFFECTS_LEN, nvmedata.EFFECTS_COUNT * nvmedata.EFFECTS_LEN, [], 0
    if off <= half and n >= step:
        first, admin = off // step, min((half - off) // step, n // step)
        out = [(step * i, f"Admin Command Supported {first + i} (ACS{first + 1})") for i in range(admin)]
    rest = min(n // step - admin, nvmedata.EFFECTS_COUNT)
    if rest <= 0:
        return out, False
    io_at = half + step  # 1028
    first, poff = ((off - io_at) // step if off > io_at else 0), (io_at - off if off < io_at else 0)
    fit = max(0, min(rest, (n - poff) // step))
    out += [(poff + step * i, f"I/0 Command Supported {first + i} (IOCS{first + 1})") for i in range(fit)]
    return out, fit < rest


def _identify(cns: int, at: int, data: bytes):
    """The rows of Identify data for `cns`; the LBA formats and namespace IDs as many as `data` says."""
    if cns == CNS_CTRL:
        return IDENTIFY_CTRL
    if cns == CNS_NS:
        formats = range(min(data[25] + 1, nvmedata.LBA_FORMATS)) if at == 0 and len(data) > 25 else ()  # NLBAF
        return _R["ns"] + _entries(_R["lbaf"], 0, 4, formats) + _R["ns_tail"]
    if cns == CNS_NS_LIST:
        ids = [int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data) - 3, 4)]
        return _entries(_R["ns_list"], at, 4, range(ids.index(0) if 0 in ids else len(ids)))  # ends at a 0
    return ()


def _window(rows, at: int, n: int):
    out = []
    for r in rows:
        end = min(r.off + r.size, at + n) if r.key in CLIPPED else r.off + r.size
        if at <= r.off < at + n and end <= at + n or r.key in CLIPPED and r.off < at + n and end > at:
            start = max(r.off, at)
            out.append(r._replace(off=start - at, size=end - start))
    return tuple(out)


def is_nvme_service(service_id: int) -> bool:
    """An RDMA-CM service ID for TCP port 4420 (Wireshark's test in packet-nvme-rdma.c)."""
    return service_id & SID_ULP_TCP_MASK == SID_ULP_TCP and service_id & 0xFFFF == NVME_PORT


DISPLAY = {
    key: digits
    for digits, keys in {
        -1: (
            "nvme-rdma.cm.req.reserved nvme-rdma.cm.rsp.reserved nvme.cmd.rsvd1 nvme.cmd.rsvd3 "
            "nvme.fabrics.cmd.auth.rsvd1 nvme.fabrics.cmd.auth.rsvd3 nvme.fabrics.cmd.connect.rsvd1 "
            "nvme.fabrics.cmd.connect.rsvd2 nvme.fabrics.cmd.connect.rsvd3 nvme.fabrics.cmd.opc "
            "nvme.fabrics.cmd.prop_get.rsvd2 nvme.fabrics.cmd.prop_get_set.rsvd0 "
            "nvme.fabrics.cmd.prop_get_set.rsvd1 nvme.fabrics.cmd.prop_set.rsvd nvme.fabrics.cqe.connect.rsvd "
            "nvme.fabrics.cqe.prop_set.rsvd nvme.fabrics.prop_get_set.data"
        ),
        0: (
            "nvme-rdma.cm.rej.recfmt nvme-rdma.cm.req.hrqsize nvme-rdma.cm.req.hsqsize nvme-rdma.cm.req.qid nvme- "
            "rdma.cm.req.recfmt nvme-rdma.cm.rsp.crqsize nvme-rdma.cm.rsp.recfmt nvme.cmd.get_logpage.dword10.id "
            "nvme.cmd.get_logpage.lpo nvme.cmd.nlb nvme.cmd.sgl1.len nvme.fabrics.cmd.auth.al "
            "nvme.fabrics.cmd.connect.kato nvme.fabrics.cmd.connect.qid nvme.fabrics.cmd.connect.recfmt "
            "nvme.fabrics.cmd.connect.sqsize"
        ),
        1: ("nvme.cmd.get_logpage.dword10.rae nvme.cqe.status.dnr nvme.cqe.status.m"),
        2: (
            "nvme.cmd.dsm.access_freq nvme.cmd.dsm.access_lat nvme.cmd.dsm.incompressible nvme.cmd.dsm.seq_req "
            "nvme.cmd.fuse_op nvme.cmd.opc nvme.cmd.psdt nvme.cmd.rsvd nvme.cmd.sgl.subtype nvme.cmd.sgl.type "
            "nvme.fabrics.cmd.auth.rsvd2 nvme.fabrics.cmd.auth.secp nvme.fabrics.cmd.auth.spsp0 "
            "nvme.fabrics.cmd.auth.spsp1 nvme.fabrics.cmd.connect.cattr nvme.fabrics.cmd.connect.cattr.dfc "
            "nvme.fabrics.cmd.connect.cattr.dioq nvme.fabrics.cmd.connect.cattr.pc "
            "nvme.fabrics.cmd.connect.cattr.rsvd nvme.fabrics.cmd.fctype nvme.fabrics.cmd.prop_get_set.attrib "
            "nvme.fabrics.cmd.prop_get_set.attrib.rsvd nvme.fabrics.cmd.prop_get_set.attrib.size "
            "nvme.fabrics.cmd.rsvd"
        ),
        4: (
            "nvme-rdma.cm.rej.status nvme-rdma.cm.req.cntlid nvme.cmd.cid nvme.cmd.elbat nvme.cmd.elbatm "
            "nvme.cmd.fua nvme.cmd.lr nvme.cmd.prinfo nvme.cmd.prinfo.action nvme.cmd.prinfo.apptag nvme.cmd.prinfo.guard "
            "nvme.cmd.prinfo.lbrtag nvme.cmd.rsvd2 nvme.cqe.cid nvme.cqe.sqhd nvme.cqe.sqid "
            "nvme.cqe.status nvme.cqe.status.crd nvme.cqe.status.p nvme.cqe.status.rsvd nvme.cqe.status.sc nvme.cqe.status.sct "
            "nvme.fabrics.cmd.cid nvme.fabrics.cqe.connect.authreq nvme.fabrics.cqe.connect.cntrlid"
        ),
        8: (
            "nvme.cmd.dword10 nvme.cmd.dword11 nvme.cmd.dword12 nvme.cmd.dword13 nvme.cmd.dword14 "
            "nvme.cmd.dword15 nvme.cmd.eilbrt nvme.cmd.get_logpage.dword10 nvme.cmd.get_logpage.dword10.lsp "
            "nvme.cmd.get_logpage.dword10.numdl nvme.cmd.get_logpage.dword10.rsvd nvme.cmd.get_logpage.dword11 "
            "nvme.cmd.get_logpage.dword11.lsi nvme.cmd.get_logpage.dword11.numdu nvme.cmd.get_logpage.dword14 "
            "nvme.cmd.identify.dword10 nvme.cmd.identify.dword10.cns nvme.cmd.identify.dword10.cntid "
            "nvme.cmd.identify.dword10.rsvd nvme.cmd.identify.dword11 nvme.cmd.identify.dword11.rsvd "
            "nvme.cmd.identify.dword14 nvme.cmd.identify.dword14.rsvd nvme.cmd.identify.dword14.uuid_index "
            "nvme.cmd.identify.dwrod11.nvmesetid nvme.cmd.identify.get_logpage.dword14.rsvd "
            "nvme.cmd.identify.get_logpage.dword14.uuid_index nvme.cmd.nsid nvme.cmd.sgl1.key nvme.cqe.dword0 "
            "nvme.cqe.dword1 nvme.fabrics.cmd.prop_get_set.offset"
        ),
        16: ("nvme.cmd.mptr nvme.cmd.sgl1.addr nvme.cmd.slba"),
    }.items()
    for key in keys.split()
}
DISPLAY.update(
    {prefix + name: shown for prefix, rows in _STRUCTURES.values() for name, _, _, _, shown in rows if shown != "s"}
)
DISPLAY["nvme.cmd.get_logpage.numd"] = 0
_SF_BITS = ("ns", "fwa", "tel", "ana", "plat", "lba", "eg", "disc")  # the event kinds AEC enables
DISPLAY.update({r.key: 8 for r in SET_FEATURES_HEAD + SET_FEATURES_TAIL + FEATURES[0x07] + FEATURES[0x0B]})
DISPLAY.update({f"{_SF}dword11.aec.{k}": 1 for k in _SF_BITS})
DISPLAY.update({k: 0 for k in (_SF + "dword11.nq.nsqr", _SF + "dword11.nq.ncqr")})  # counts (0's based)
DISPLAY.update({r.key: 0 if r.mask else 8 for r in CQE_NUMBER_OF_QUEUES[:3]})
DISPLAY.update(  # CC and CSTS (CAP and VS are nvmedata's)
    {key: 0 if key.endswith(("mps", "iosqes", "iocqes")) else 8 for o in (0x14, 0x1C) for key, *_ in PROPERTIES[o]}
)
DISPLAY.update(
    {
        "nvme-rdma.cmd.qid": 4,
        "nvme-rdma.unknown_data": -1,
        "nvme.data": -1,
        "nvme.cmd_pkt": 0,
        "nvme.fabrics.cmd_pkt": 0,
        "nvme.cqe_pkt": 0,
        "nvme.fabrics.cqe_pkt": 0,
        "nvme-rdma.read_from_host_resp": -1,
    }
)
# Fields that follow a command across frames (ibwire.decode.nvme), not from one payload's bytes.
TRACKED = {
    "nvme-rdma.cmd.qid": "uint",
    "nvme.cmd_pkt": "uint",
    "nvme.fabrics.cmd_pkt": "uint",
    "nvme.cqe_pkt": "uint",
    "nvme.fabrics.cqe_pkt": "uint",
    "nvme.cmd_latency": "float",
    "nvme.fabrics.cmd_latency": "float",
    "nvme-rdma.reassembled.length": "uint",
    "nvme.fabrics.data_req": "uint",
    "nvme-rdma.read_from_host_prev": "uint",
    "nvme-rdma.write_to_host_prev": "uint",
    "nvme-rdma.read_from_host_resp": "bytes",
    "nvme-rdma.read_to_host_req": "protocol",
    "nvme-rdma.write_to_host_req": "protocol",
}
