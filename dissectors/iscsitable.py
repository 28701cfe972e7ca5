"""iSER and the iSCSI PDUs it carries without scapy: the iSER header (RFC 7145 §9.2: flags with the
opcode, WSV and RSV bits, write STag and base offset, read STag and base offset; Hello and HelloReply
§9.3-9.4 with IRD, ORD and REJ), the iSCSI basic header segment of every PDU (RFC 7143 §11: login,
text, NOP, SCSI command and response, Data-Out/In, task management, logout) and the SCSI CDB of a command
(SBC-3: READ/WRITE 10 and 16), read into trees shaped as tshark 4.4 shows them, under Wireshark's field
names (packet-iser.c, packet-iscsi.c, packet-scsi.c, packet-scsi-sbc.c).

A tree is a list of (key, value) leaves and (label, list) subtrees (dissectors.rpcrdmatable.leaves reads
them).  A PDU cut short is decoded as far as its bytes go: the tree then ends with ("_truncated", True)."""

import struct

from dissectors.numbers import ISCSI_PORT
from dissectors.nvmetable import SID_ULP_TCP, SID_ULP_TCP_MASK

ISER_HEADER, BHS = 28, 48  # RFC 7145 §9.2; RFC 7143 §11.2
CONTROL, HELLO, HELLO_REPLY = 1, 2, 3  # the iSER opcode, the flags' high nibble
WSV, RSV, REJ = 0x08, 0x04, 0x01
NOP_OUT, SCSI_CMD, TMF, LOGIN, TEXT, DATA_OUT, LOGOUT = 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
NOP_IN, SCSI_RSP, TMF_RSP, LOGIN_RSP, TEXT_RSP, DATA_IN, LOGOUT_RSP = 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26
OPCODES = {
    NOP_OUT: "NOP Out",
    SCSI_CMD: "SCSI Command",
    TMF: "Task Management Function",
    LOGIN: "Login Command",
    TEXT: "Text Command",
    DATA_OUT: "SCSI Data Out",
    LOGOUT: "Logout Command",
    0x10: "SNACK Request",
    NOP_IN: "NOP In",
    SCSI_RSP: "SCSI Response",
    TMF_RSP: "Task Management Function Response",
    LOGIN_RSP: "Login Response",
    TEXT_RSP: "Text Response",
    DATA_IN: "SCSI Data In",
    LOGOUT_RSP: "Logout Response",
    0x31: "Ready To Transfer",
    0x32: "Asynchronous Message",
    0x3F: "Reject",
}
READ_10, WRITE_10, READ_16, WRITE_16 = 0x28, 0x2A, 0x88, 0x8A
INQUIRY, MODE_SENSE_6, SERVICE_ACTION_IN_16, REPORT_LUNS, MAINTENANCE_IN = 0x12, 0x1A, 0x9E, 0xA0, 0xA3
READ_CAPACITY_16, REPORT_OPCODES = 0x10, 0x0C  # the service actions of SERVICE ACTION IN(16), MAINTENANCE IN
SPC_MODE_PAGES = {0x00, 0x02, 0x09, 0x0A, 0x18, 0x19, 0x1A, 0x1C, 0x3F}  # packet-scsi.c scsi_spc_modepage_val
CHECK_CONDITION = 0x02
SBC_NAMES = {0x00: "Test Unit Ready", READ_10: "Read(10)", WRITE_10: "Write(10)"}
SBC_NAMES.update({READ_16: "Read(16)", WRITE_16: "Write(16)", 0x12: "Inquiry", 0x25: "Read Capacity(10)"})
SBC_NAMES.update({0x35: "Synchronize Cache(10)", 0x9E: "Service Action In(16)", 0xA0: "Report LUNs"})
SBC_NAMES.update({MODE_SENSE_6: "Mode Sense(6)", MAINTENANCE_IN: "Mgmt Protocol In"})
STATUS = {0x00: "Good", 0x02: "Check Condition", 0x08: "Busy", 0x18: "Reservation Conflict", 0x28: "Task Set Full"}
TMF_FUNCTIONS = {1: "Abort Task", 2: "Abort Task Set", 3: "Clear ACA", 4: "Clear Task Set"}
TMF_FUNCTIONS.update({5: "Logical Unit Reset", 6: "Target Warm Reset", 7: "Target Cold Reset", 8: "Target Reassign"})
TMF_RESPONSES = {0: "Function complete", 1: "Task not in task set", 2: "LUN does not exist"}
TMF_RESPONSES.update({3: "Task still allegiant", 5: "Task management function not supported", 255: "Function rejected"})
LOGOUT_REASONS = {0: "Close session", 1: "Close connection", 2: "Remove connection for recovery"}
LOGIN_STATUS = {0x0000: "Success", 0x0201: "Authentication failed", 0x0203: "Target not found"}

_B = "bool"
_U = "uint"
# Field types for filters and how many hex digits tshark prints (1: a boolean, -1: bytes), Wireshark 4.4's
FIELDS, DISPLAY = {}, {}
for _names, _kind, _digits in (
    ("iser.flags iser.flags.opcode", _U, 2),
    ("iser.flags.wsv iser.flags.rsv iser.flags.rej", _U, 1),
    ("iser.write_stag iser.read_stag", _U, 8),
    ("iser.write_base_offset iser.read_base_offset", _U, 16),
    ("iser.ird iser.ord", _U, 4),
    ("iscsi.opcode iscsi.flags iscsi.login.csg iscsi.login.nsg iscsi.versionmax iscsi.versionmin", _U, 2),
    ("iscsi.versionactive iscsi.scsicommand.attr iscsi.scsiresponse.response iscsi.scsiresponse.status", _U, 2),
    ("iscsi.taskmanfun.function iscsi.taskmanfun.response iscsi.logout.reason iscsi.logout.response", _U, 2),
    ("iscsi.isid.t iscsi.isid.a iscsi.isid.c scsi.lun.address_mode", _U, 2),
    ("iscsi.isid.b iscsi.isid.d iscsi.tsih iscsi.cid iscsi.login.status scsi.lun", _U, 4),
    ("iscsi.time2wait iscsi.time2retain", _U, 4),
    ("iscsi.initiatortasktag iscsi.targettransfertag iscsi.expdatasn iscsi.taskmanfun.referencedtasktag", _U, 8),
    ("iscsi.I iscsi.login.T iscsi.login.C iscsi.text.F iscsi.text.C iscsi.scsicommand.F", _U, 1),
    ("iscsi.scsicommand.R iscsi.scsicommand.W iscsi.scsiresponse.o iscsi.scsiresponse.u", _U, 1),
    ("iscsi.scsiresponse.O iscsi.scsiresponse.U iscsi.scsidata.F iscsi.scsidata.A", _U, 1),
    ("iscsi.scsidata.O iscsi.scsidata.U iscsi.scsidata.S", _U, 1),
    ("iscsi.totalahslength iscsi.datasegmentlength iscsi.cmdsn iscsi.expstatsn iscsi.statsn", _U, 0),
    ("iscsi.expcmdsn iscsi.maxcmdsn iscsi.datasn iscsi.bufferOffset iscsi.refcmdsn", _U, 0),
    ("iscsi.scsicommand.expecteddatatransferlength iscsi.scsiresponse.bidireadresidualcount", _U, 0),
    ("iscsi.scsiresponse.residualcount iscsi.scsiresponse.senselength iscsi.scsidata.readresidualcount", _U, 0),
    ("iscsi.request_frame iscsi.response_frame scsi.request_frame scsi.response_frame", _U, 0),
    ("iscsi.isid iscsi.pingdata iscsi.immediatedata iscsi.padding scsi.sns.command_specific_information", "bytes", -1),
    ("scsi_sbc.rdwr16.lba", "bytes", -1),
    ("iscsi.keyvalue", "string", 0),
    ("scsi.time", "float", 0),
    ("scsi.inquiry.devtype scsi_sbc.opcode scsi_sbc.read.flags scsi_sbc.rdprotect scsi_sbc.wrprotect", _U, 2),
    ("scsi_sbc.group scsi.cdb.control scsi.cdb.control.vendorspecific scsi.cdb.control.reserved", _U, 2),
    ("scsi.cdb.control.obs1 scsi.cdb.control.obs2 scsi.sns.errtype scsi.sns.key", _U, 2),
    ("scsi.sns.asc scsi.sns.ascq scsi.sns.fru", _U, 2),
    ("scsi_sbc.dpo scsi_sbc.fua scsi_sbc.fua_nv scsi.cdb.control.naca scsi.sns.filemark scsi.sns.eom", _U, 1),
    ("scsi.sns.ili scsi.sns.sksv", _U, 1),
    ("scsi_sbc.rdwr10.lba scsi.sns.info", _U, 8),
    ("scsi.sns.ascascq", _U, 4),
    ("scsi.sns.sks_info", _U, 6),
    ("scsi_sbc.rdwr10.xferlen scsi_sbc.rdwr12.xferlen scsi.sns.valid scsi.sns.addlen", _U, 0),
    ("scsi.inquiry.flags scsi.inquiry.evpd.pagecode scsi.inquiry.cmdt.pagecode scsi.cdb.inq.control", _U, 2),
    ("scsi.inquiry.control.vendorspecific scsi.inquiry.control.reserved scsi.inquiry.control.obs1", _U, 2),
    ("scsi.inquiry.control.obs2 scsi.mode.flags scsi.mode.spc.pagecode scsi.mode.sbc.pagecode", _U, 2),
    ("scsi.spc.select_report scsi.mpi.service_action scsi.report_opcodes.options scsi_sbc.sa scsi.status", _U, 2),
    ("scsi.report_opcodes.requested_operation_code", _U, 2),
    ("scsi.report_opcodes.requested_service_action", _U, 4),
    ("scsi.inquiry.control.naca scsi.report_opcodes.rctd", _U, 1),
    ("scsi.mode.pc scsi.cdb.alloclen scsi.cdb.alloclen16 scsi.cdb.alloclen32 scsi_sbc.alloclen32", _U, 0),
    ("iscsi.time", "float", 0),
    ("iser iscsi scsi scsi_sbc", "protocol", 0),
    ("iscsi.data_call", _U, 0),  # ibwire's own: the command whose STag an RDMA READ or WRITE uses
):
    for _name in _names.split():
        FIELDS[_name] = _kind
        if _digits:
            DISPLAY[_name] = _digits


class Short(Exception):
    """The PDU ends before a field it announces."""


def is_iser_service(service_id: int) -> bool:
    """An RDMA-CM service ID for TCP port 3260 (iSCSI, so iSER: RFC 7145 §5.1)."""
    return service_id & SID_ULP_TCP_MASK == SID_ULP_TCP and service_id & 0xFFFF == ISCSI_PORT


def is_iser(payload: bytes) -> bool:
    """What tshark 4.4 accepts as iSER (packet-iser.c): an iSER header and a whole BHS, a control-type PDU
    with only WSV/RSV among its low flag bits, or a Hello/HelloReply with MaxVer and MinVer 10."""
    if len(payload) < ISER_HEADER + BHS:
        return False
    op, low = payload[0] >> 4, payload[0] & 0x0F
    if op == CONTROL:
        return low & ~(WSV | RSV) == 0
    return op in (HELLO, HELLO_REPLY) and payload[1] == 0xAA


def iser_header(payload: bytes):
    """(tree, info) of the iSER header: info holds opcode, write (STag, base offset), read (STag, base
    offset)."""
    flags = payload[0]
    op = flags >> 4
    info = {"opcode": op, "write": (0, 0), "read": (0, 0)}
    if op != CONTROL:
        bits = [("iser.flags.opcode", op)] + ([("iser.flags.rej", bool(flags & REJ))] if op == HELLO_REPLY else [])
        word = struct.unpack(">H", payload[2:4])[0]
        return [
            ("iser.flags", flags),
            ("iser.flags_tree", bits),
            ("iser.ird" if op == HELLO else "iser.ord", word),
        ], info
    wstag, wva, rstag, rva = struct.unpack(">IQIQ", payload[4:ISER_HEADER])
    info["write"], info["read"] = (wstag, wva), (rstag, rva)
    bits = [("iser.flags.opcode", op), ("iser.flags.wsv", bool(flags & WSV)), ("iser.flags.rsv", bool(flags & RSV))]
    tree = [("iser.flags", flags), ("iser.flags_tree", bits), ("iser.write_stag", wstag)]
    tree += [("iser.write_base_offset", wva), ("iser.read_stag", rstag), ("iser.read_base_offset", rva)]
    return tree, info


def lun_items(raw: bytes) -> tuple:
    """The LUN field as tshark shows it: the address method and the LUN of its first level."""
    mode, value = raw[0] >> 6, struct.unpack(">H", raw[:2])[0] & 0x3FFF
    items = [("scsi.lun.address_mode", mode), ("scsi.lun", value)]
    return ("LUN", items) if value == 0 else ("LUNs", [("LUN 0", items)])


def _u32(pdu: bytes, at: int) -> int:
    return struct.unpack(">I", pdu[at : at + 4])[0]


def _u16(pdu: bytes, at: int) -> int:
    return struct.unpack(">H", pdu[at : at + 2])[0]


def _keys(data: bytes) -> list:
    """Text keys (RFC 7143 §6.1): each NUL-terminated key=value; a part with no '=' ends the list."""
    out = []
    for part in data.split(b"\0"):
        if b"=" not in part:
            break
        out.append(("iscsi.keyvalue", part.decode("utf-8", "replace")))
    return [("Key/Value Pairs", out)] if out else []


def _segment(pdu: bytes, key: str, as_keys: bool = False) -> list:
    """The data segment (what of it the message holds) and its padding to 4 bytes."""
    length = int.from_bytes(pdu[5:8], "big")
    data = pdu[BHS : BHS + length]
    items = (_keys(data) if as_keys else [(key, data)]) if data else []
    pad = pdu[BHS + len(data) : BHS + len(data) + (-len(data) & 3)] if len(data) == length else b""
    return items + ([("iscsi.padding", pad)] if pad else [])


def _lengths(pdu: bytes) -> list:
    return [("iscsi.totalahslength", pdu[4]), ("iscsi.datasegmentlength", int.from_bytes(pdu[5:8], "big"))]


def _sn(pdu: bytes, *names: str, at: int = 24) -> list:
    return [(f"iscsi.{n}", _u32(pdu, at + 4 * i)) for i, n in enumerate(names)]


def _itt(pdu: bytes) -> list:
    return [("iscsi.initiatortasktag", _u32(pdu, 16))]


def _login(pdu: bytes, response: bool) -> list:
    """Login Request/Response (RFC 7143 §11.12-11.13)."""
    f, isid = pdu[1], pdu[8:14]
    items = [("iscsi.login.T", bool(f & 0x80)), ("iscsi.login.C", bool(f & 0x40))]
    items += [("iscsi.login.csg", f >> 2 & 3), ("iscsi.login.nsg", f & 3), ("iscsi.versionmax", pdu[2])]
    items += [("iscsi.versionactive" if response else "iscsi.versionmin", pdu[3])] + _lengths(pdu)
    parts = [("iscsi.isid.t", isid[0] >> 6), ("iscsi.isid.a", isid[0] & 0x3F), ("iscsi.isid.b", _u16(isid, 1))]
    parts += [("iscsi.isid.c", isid[3]), ("iscsi.isid.d", _u16(isid, 4))]
    items += [("iscsi.isid", isid), ("iscsi.isid_tree", parts), ("iscsi.tsih", _u16(pdu, 14))] + _itt(pdu)
    if response:
        items += _sn(pdu, "statsn", "expcmdsn", "maxcmdsn") + [("iscsi.login.status", _u16(pdu, 36))]
    else:
        items += [("iscsi.cid", _u16(pdu, 20))] + _sn(pdu, "cmdsn", "expstatsn")
    return items + _segment(pdu, "", as_keys=True)


def _text_nop(pdu: bytes, op: int) -> list:
    """Text Request/Response (§11.10-11.11), NOP-Out/In (§11.18-11.19)."""
    items = []
    if op in (TEXT, TEXT_RSP):
        f = pdu[1]
        items += [
            ("iscsi.flags", f),
            ("iscsi.flags_tree", [("iscsi.text.F", bool(f & 0x80)), ("iscsi.text.C", bool(f & 0x40))]),
        ]
    items += _lengths(pdu) + [lun_items(pdu[8:16])] + _itt(pdu) + [("iscsi.targettransfertag", _u32(pdu, 20))]
    items += _sn(pdu, "cmdsn", "expstatsn") if op < 0x20 else _sn(pdu, "statsn", "expcmdsn", "maxcmdsn")
    return items + _segment(pdu, "iscsi.pingdata", as_keys=op in (TEXT, TEXT_RSP))


def _flags(f: int, *bits) -> list:
    return [("iscsi.flags", f), ("iscsi.flags_tree", [(key, bool(f & mask)) for key, mask in bits])]


def _command(pdu: bytes) -> list:
    """SCSI Command (§11.3): its flags as tshark places them, after the PDU's fields."""
    items = _lengths(pdu) + [lun_items(pdu[8:16])] + _itt(pdu)
    items += [("iscsi.scsicommand.expecteddatatransferlength", _u32(pdu, 20))] + _sn(pdu, "cmdsn", "expstatsn", at=24)
    items += _segment(pdu, "iscsi.immediatedata")
    f = pdu[1]
    bits = _flags(f, ("iscsi.scsicommand.F", 0x80), ("iscsi.scsicommand.R", 0x40), ("iscsi.scsicommand.W", 0x20))
    bits[1][1].append(("iscsi.scsicommand.attr", f & 7))
    return items + bits


def _response(pdu: bytes) -> list:
    """SCSI Response (§11.4); the sense length opens its data segment."""
    items = [("iscsi.scsiresponse.response", pdu[2]), ("iscsi.scsiresponse.status", pdu[3])] + _lengths(pdu) + _itt(pdu)
    items += _sn(pdu, "statsn", "expcmdsn", "maxcmdsn") + [("iscsi.expdatasn", _u32(pdu, 36))]
    items += [("iscsi.scsiresponse.bidireadresidualcount", _u32(pdu, 40))]
    items += [("iscsi.scsiresponse.residualcount", _u32(pdu, 44))]
    if int.from_bytes(pdu[5:8], "big") >= 2 and len(pdu) >= BHS + 2:
        items.append(("iscsi.scsiresponse.senselength", _u16(pdu, BHS)))
    masks = (("o", 0x10), ("u", 0x08), ("O", 0x04), ("U", 0x02))
    return items + _flags(pdu[1], *((f"iscsi.scsiresponse.{n}", m) for n, m in masks))


def _data(pdu: bytes, op: int) -> list:
    """SCSI Data-Out / Data-In (§11.7)."""
    f = pdu[1]
    if op == DATA_OUT:
        items = _lengths(pdu) + [lun_items(pdu[8:16])] + _itt(pdu) + [("iscsi.targettransfertag", _u32(pdu, 20))]
        items += _sn(pdu, "expstatsn", at=28) + _sn(pdu, "datasn", "bufferOffset", at=36)
        return items + _flags(f, ("iscsi.scsidata.F", 0x80))
    masks = (("F", 0x80), ("A", 0x40), ("O", 0x04), ("U", 0x02), ("S", 0x01))
    items = _flags(f, *((f"iscsi.scsidata.{n}", m) for n, m in masks))
    items += ([("iscsi.scsiresponse.status", pdu[3])] if f & 1 else []) + _lengths(pdu) + _itt(pdu)
    items += _sn(pdu, "statsn", "expcmdsn", "maxcmdsn", "datasn", "bufferOffset")
    return items + [("iscsi.scsidata.readresidualcount", _u32(pdu, 44))]


def _tmf_logout(pdu: bytes, op: int) -> list:
    """Task Management Function Request/Response (§11.5-11.6), Logout Request/Response (§11.14-11.15)."""
    if op == TMF:
        items = [("iscsi.taskmanfun.function", pdu[1] & 0x7F)] + _lengths(pdu) + [lun_items(pdu[8:16])] + _itt(pdu)
        items += [("iscsi.taskmanfun.referencedtasktag", _u32(pdu, 20))] + _sn(pdu, "cmdsn", "expstatsn", "refcmdsn")
        return items
    if op == TMF_RSP:
        return [("iscsi.taskmanfun.response", pdu[2])] + _itt(pdu) + _sn(pdu, "statsn", "expcmdsn", "maxcmdsn")
    if op == LOGOUT:
        items = [("iscsi.logout.reason", pdu[1] & 0x7F)] + _lengths(pdu) + _itt(pdu)
        return items + [("iscsi.cid", _u16(pdu, 20))] + _sn(pdu, "cmdsn", "expstatsn")
    items = [("iscsi.logout.response", pdu[2])] + _lengths(pdu) + _itt(pdu) + _sn(pdu, "statsn", "expcmdsn", "maxcmdsn")
    return items + [("iscsi.time2wait", _u16(pdu, 40)), ("iscsi.time2retain", _u16(pdu, 42))]


def iscsi_pdu(pdu: bytes):
    """(tree, info) of an iSCSI PDU; info holds opcode, itt, lun, cdb, flags, status, data segment."""
    if len(pdu) < BHS:
        return [("_truncated", True)], {}
    op = pdu[0] & 0x3F
    info = {"opcode": op, "itt": _u32(pdu, 16), "lun": lun_items(pdu[8:16]), "flags": pdu[1], "raw": pdu[:BHS]}
    info["response"] = pdu[2]
    info["data"] = pdu[BHS : BHS + int.from_bytes(pdu[5:8], "big")]
    items = [("iscsi.opcode", op)]
    if op < 0x20 and op not in (DATA_OUT, LOGIN, 0x10):
        items.append(("iscsi.I", bool(pdu[0] & 0x40)))
    if op in (LOGIN, LOGIN_RSP):
        items += _login(pdu, op == LOGIN_RSP)
    elif op in (TEXT, TEXT_RSP, NOP_OUT, NOP_IN):
        items += _text_nop(pdu, op)
    elif op == SCSI_CMD:
        info["cdb"], info["length"] = pdu[32:48], _u32(pdu, 20)
        items += _command(pdu)
    elif op == SCSI_RSP:
        info["status"] = pdu[3]
        items += _response(pdu)
    elif op in (DATA_OUT, DATA_IN):
        info["status"] = pdu[3] if op == DATA_IN and pdu[1] & 1 else None
        items += _data(pdu, op)
    elif op in (TMF, TMF_RSP, LOGOUT, LOGOUT_RSP):
        items += _tmf_logout(pdu, op)
    else:
        items += _lengths(pdu) + _itt(pdu)
    if int.from_bytes(pdu[5:8], "big") > len(pdu) - BHS:
        items.append(("_truncated", True))
    return items, info


def _control(ctl: int, name: str = "scsi.cdb.control", bit: str = "scsi.cdb.control") -> list:
    """The CDB's control byte (SAM-5 §5.2) and its bits; INQUIRY's under its own names (packet-scsi.c)."""
    bits = [(f"{bit}.vendorspecific", ctl >> 6), (f"{bit}.reserved", ctl >> 3 & 7)]
    bits += [(f"{bit}.naca", bool(ctl & 4)), (f"{bit}.obs1", ctl >> 1 & 1), (f"{bit}.obs2", ctl & 1)]
    return [(name, ctl), (f"{name}_tree", bits)]


def _spc(cdb: bytes) -> list:
    """The fields of the other CDBs a Linux initiator sends when it scans a LUN, as packet-scsi.c and
    packet-scsi-sbc.c show them: INQUIRY, MODE SENSE(6), REPORT LUNS (SPC-4 §6.6, §6.11, §6.33), REPORT
    SUPPORTED OPERATION CODES (MAINTENANCE IN, §6.35), READ CAPACITY(16) (SBC-3 §5.16); the control byte of
    any other 6-byte CDB."""
    op = cdb[0]
    if op == INQUIRY:
        f = cdb[1]
        kind = "evpd" if f & 1 else "cmdt" if f & 2 else None
        items = [("scsi.inquiry.flags", f)] + ([(f"scsi.inquiry.{kind}.pagecode", cdb[2])] if kind else [])
        items += [("scsi.cdb.alloclen16", _u16(cdb, 3))]
        return items + _control(cdb[5], "scsi.cdb.inq.control", "scsi.inquiry.control")
    if op == MODE_SENSE_6:
        page = cdb[2] & 0x3F
        kind = "spc" if page in SPC_MODE_PAGES else "sbc"
        items = [("scsi.mode.flags", cdb[1]), ("scsi.mode.pc", cdb[2] >> 6), (f"scsi.mode.{kind}.pagecode", page)]
        return items + [("scsi.cdb.alloclen", cdb[4])] + _control(cdb[5])
    if op == REPORT_LUNS:
        return [("scsi.spc.select_report", cdb[2]), ("scsi.cdb.alloclen32", _u32(cdb, 6))] + _control(cdb[11])
    if op == MAINTENANCE_IN:
        items = [("scsi.mpi.service_action", cdb[1] & 0x1F)]
        if cdb[1] & 0x1F == REPORT_OPCODES:
            items += [("scsi.report_opcodes.rctd", bool(cdb[2] & 0x80)), ("scsi.report_opcodes.options", cdb[2] & 7)]
            items += [("scsi.report_opcodes.requested_operation_code", cdb[3])]
            items += [("scsi.report_opcodes.requested_service_action", _u16(cdb, 4))]
            items += [("scsi.cdb.alloclen32", _u32(cdb, 6))]
        return items + _control(cdb[11])
    if op == SERVICE_ACTION_IN_16 and cdb[1] & 0x1F == READ_CAPACITY_16:
        return [("scsi_sbc.sa", READ_CAPACITY_16), ("scsi_sbc.alloclen32", _u32(cdb, 10))] + _control(cdb[15])
    return _control(cdb[5]) if op < 0x20 else []


def cdb_items(cdb: bytes) -> list:
    """The SBC fields of a CDB (SBC-3 §5.15-5.16, §5.40-5.41): READ/WRITE 10 and 16 in full, others by
    opcode (and control byte where the CDB is 6 bytes)."""
    op = cdb[0]
    items = [("scsi_sbc.opcode", op)]
    if op in (READ_10, WRITE_10, READ_16, WRITE_16):
        f = cdb[1]
        bits = [("scsi_sbc.rdprotect" if op in (READ_10, READ_16) else "scsi_sbc.wrprotect", f >> 5)]
        bits += [("scsi_sbc.dpo", bool(f & 0x10)), ("scsi_sbc.fua", bool(f & 0x08)), ("scsi_sbc.fua_nv", bool(f & 2))]
        items += [("scsi_sbc.read.flags", f), ("scsi_sbc.read.flags_tree", bits)]
        if op in (READ_10, WRITE_10):
            items += [("scsi_sbc.rdwr10.lba", _u32(cdb, 2)), ("scsi_sbc.group", cdb[6] & 0x1F)]
            return items + [("scsi_sbc.rdwr10.xferlen", _u16(cdb, 7))] + _control(cdb[9])
        items += [("scsi_sbc.rdwr16.lba", cdb[2:10]), ("scsi_sbc.rdwr12.xferlen", _u32(cdb, 10))]
        return items + [("scsi_sbc.group", cdb[14] & 0x1F)] + _control(cdb[15])
    return items + _spc(cdb)


def lba_blocks(cdb: bytes):
    """(LBA, transfer length in blocks) of a READ/WRITE 10 or 16 CDB, else (None, None)."""
    if cdb[0] in (READ_10, WRITE_10):
        return _u32(cdb, 2), _u16(cdb, 7)
    if cdb[0] in (READ_16, WRITE_16):
        return struct.unpack(">Q", cdb[2:10])[0], _u32(cdb, 10)
    return None, None


def sense_items(data: bytes) -> list:
    """Fixed-format sense data (SPC-4 §4.5.3) after its 2-byte length."""
    s = data[2 : 2 + _u16(data, 0)] if len(data) >= 2 else b""
    if len(s) < 18:
        return []
    items = [("scsi.sns.errtype", s[0] & 0x7F), ("scsi.sns.valid", s[0]), ("scsi.sns.filemark", bool(s[2] & 0x80))]
    items += [("scsi.sns.eom", bool(s[2] & 0x40)), ("scsi.sns.ili", bool(s[2] & 0x20)), ("scsi.sns.key", s[2] & 0xF)]
    items += [
        ("scsi.sns.info", _u32(s, 3)),
        ("scsi.sns.addlen", s[7]),
        ("scsi.sns.command_specific_information", s[8:12]),
    ]
    items += [("scsi.sns.ascascq", _u16(s, 12)), ("scsi.sns.asc", s[12]), ("scsi.sns.ascq", s[13])]
    items += [("scsi.sns.fru", s[14]), ("scsi.sns.sksv", bool(s[15] & 0x80))]
    return items + [("scsi.sns.sks_info", int.from_bytes(s[15:18], "big") & 0x7FFFFF)]


def info_text(op: int, info: dict, cdb=None) -> str:
    """The Info column as tshark words an iSCSI PDU: the opcode's name and what qualifies it; a SCSI
    command as `SCSI Read(10) LUN: 0x01 …`."""
    if op == SCSI_CMD and cdb is not None:
        lba, blocks = lba_blocks(cdb)
        name = SBC_NAMES.get(cdb[0], f"0x{cdb[0]:02x}")
        where = f" {info.get('length', 0)} bytes ({blocks} blocks) at LBA: {lba}" if lba is not None else ""
        return f"SCSI {name} LUN: 0x{dict(_lun_leaves(info))['scsi.lun']:02x}{where}"
    text = OPCODES.get(op, f"Opcode 0x{op:02x}")
    status = info.get("status")
    if op == SCSI_RSP or op == DATA_IN and status is not None:
        return f"{text} ({STATUS.get(status, f'0x{status:x}')})"
    if op == LOGIN_RSP and len(info.get("raw", b"")) >= BHS:
        code = _u16(info["raw"], 36)
        return f"{text} ({LOGIN_STATUS.get(code, f'0x{code:x}')})"
    if op == TMF_RSP:
        return f"{text} ({TMF_RESPONSES.get(info.get('response'), info.get('response'))})"
    if op == TMF:
        return f"{text} ({TMF_FUNCTIONS.get(info['flags'] & 0x7F, info['flags'] & 0x7F)})"
    if op == LOGOUT:
        return f"{text} ({LOGOUT_REASONS.get(info['flags'] & 0x7F, info['flags'] & 0x7F)})"
    return text


def _lun_leaves(info: dict) -> list:
    label, items = info["lun"]
    return items if label == "LUN" else items[0][1]


def lun_of(info: dict) -> int:
    """The LUN (first level) of a PDU's info."""
    return dict(_lun_leaves(info))["scsi.lun"]
