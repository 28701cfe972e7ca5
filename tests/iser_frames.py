"""iSER frames crafted byte by byte from RFC 7145 and RFC 7143 (ibwire.synth.iser builds the messages,
ibwire.synth.links frames them as RoCEv2 RC packets): an initiator logging in to a target over a queue
pair RDMA-CM connected for port 3260, a Text exchange, NOP-Out/In, SCSI READ(10) and READ(16) whose data
the target RDMA WRITEs to the read STag, WRITE(10) with immediate data and an unsolicited Data-Out, WRITE(16)
whose data the target RDMA READs from the write STag, the CDBs of a Linux LUN scan (INQUIRY, MODE SENSE(6),
REPORT LUNS, REPORT SUPPORTED OPERATION CODES, READ CAPACITY(16), as tests/test_lab_iser.py's kernels send them),
a Data-In, a CHECK CONDITION with sense data, a Task Management exchange, a login split in SEND First/Last,
Hello/HelloReply and a Logout.  The tests hand the
capture to tshark 4.4 and to ibwire."""

from pathlib import Path

from storage_oracle import write_rc_capture

from dissectors.numbers import ISCSI_PORT
from ibwire.synth import iser as m
from ibwire.synth import mads
from ibwire.synth.scenario import Port

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
INITIATOR = Port("initiator", 1, 1, mac=bytes.fromhex("020000000011"), ip4=bytes([10, 0, 1, 1]))
TARGET = Port("target", 2, 2, mac=bytes.fromhex("020000000012"), ip4=bytes([10, 0, 1, 2]))
QP = {"initiator": 0x000111, "target": 0x000222}
SEND_FIRST, SEND_LAST, SEND_ONLY, WRITE_ONLY, READ_REQUEST, READ_RESPONSE_ONLY = 0x00, 0x02, 0x04, 0x0A, 0x0C, 0x10
UD_SEND_ONLY = 0x64
SERVICE_ID = 0x0000000001060000 | ISCSI_PORT  # RDMA-CM port space TCP (IBA annex A11.3.4)
ISID = bytes.fromhex("400001370000")
SENSE = bytes.fromhex("700005000000000a00000000240000000000")  # fixed format: ILLEGAL REQUEST, ASC 0x24
LOGIN_KEYS = m.keys(
    ("InitiatorName", "iqn.2026-12.org.example:host1"),
    ("TargetName", "iqn.2026-12.org.example:disk1"),
    ("SessionType", "Normal"),
    ("AuthMethod", "None"),
)
OP_KEYS = m.keys(("HeaderDigest", "None"), ("DataDigest", "None"), ("MaxRecvDataSegmentLength", "262144"))
OP_KEYS += m.keys(("RDMAExtensions", "Yes"), ("InitiatorRecvDataSegmentLength", "262144"))
# The CDBs of the LUN scan open-iscsi's kernel initiator ran in the lab (standard and EVPD INQUIRY, REPORT LUNS,
# READ CAPACITY(16), MODE SENSE(6) of all pages and of the SBC caching page, REPORT SUPPORTED OPERATION CODES)
SCAN = ("120000002400", "120100000400", "a00000000000000010000000", "9e100000000000000000000000200000")
SCAN += ("1a003f000400", "1a0008002000", "a30c011200000000000a0000")


def setup():
    """The RDMA-CM REQ and REP that connect the initiator's QP to the target's for iSER."""
    req = mads.cm_req(0x61, SERVICE_ID, INITIATOR.guid, QP["initiator"], 100, 0xFFFF, 1, 2, bytes(16), bytes(16))
    rep = mads.cm_rep(0x62, 0x61, 2, QP["target"], 500)
    return [("initiator", UD_SEND_ONLY, req), ("target", UD_SEND_ONLY, rep)]


def _login():
    i, t, h = "initiator", "target", m.header()
    return [
        (i, SEND_ONLY, h + m.login(0x10, ISID, 0, 1, 1, 0, 0, 1, LOGIN_KEYS)),
        (t, SEND_ONLY, h + m.login_response(0x10, ISID, 0, 5, 1, 33, 0, 1, m.keys(("AuthMethod", "None")))),
        (i, SEND_ONLY, h + m.login(0x11, ISID, 0, 1, 1, 6, 1, 3, OP_KEYS)),
        (t, SEND_ONLY, h + m.login_response(0x11, ISID, 0x1234, 6, 1, 33, 1, 3, OP_KEYS)),
    ]


def _io():
    """READ(10), READ(16), WRITE(10) with immediate data and a Data-Out, WRITE(16) by RDMA READ."""
    i, t = "initiator", "target"
    data = bytes(range(256)) * 8
    out = [
        (
            i,
            SEND_ONLY,
            m.header(read=(0xAB01, 0x7F0000100000))
            + m.scsi_command(0x20, 1, m.cdb(m.READ_10, 0x800, 4), 2048, 3, 8, read=True),
        )
    ]
    out.append((t, WRITE_ONLY, data, (0x7F0000100000, 0xAB01, 2048)))
    out.append((t, SEND_ONLY, m.header() + m.scsi_response(0x20, 0, 8, 4, 36)))
    cmd = m.scsi_command(0x21, 1, m.cdb(m.READ_16, 0x123456789, 1), 512, 4, 9, read=True)
    out.append((i, SEND_ONLY, m.header(read=(0xAB02, 0x7F0000200000)) + cmd))
    out.append((t, WRITE_ONLY, data[:512], (0x7F0000200000, 0xAB02, 512)))
    out.append((t, SEND_ONLY, m.header() + m.scsi_response(0x21, 0, 9, 5, 37)))
    cmd = m.scsi_command(0x22, 1, m.cdb(m.WRITE_10, 0x40, 2), 1024, 5, 10, write=True, final=False, data=data[:512])
    out.append((i, SEND_ONLY, m.header() + cmd))
    out.append((i, SEND_ONLY, m.header() + m.data_out(0x22, 1, 0xFFFFFFFF, 10, 0, 512, data[512:1024])))
    out.append((t, SEND_ONLY, m.header() + m.scsi_response(0x22, 0, 10, 6, 38)))
    cmd = m.scsi_command(0x23, 1, m.cdb(m.WRITE_16, 0x2000, 8), 4096, 6, 11, write=True)
    out.append((i, SEND_ONLY, m.header(write=(0xCD01, 0x7F0000300000)) + cmd))
    out.append((t, READ_REQUEST, b"", (0x7F0000300000, 0xCD01, 4096)))
    out.append((i, READ_RESPONSE_ONLY, data * 2))
    out.append((t, SEND_ONLY, m.header() + m.scsi_response(0x23, 0, 11, 7, 39)))
    return out


def _scan():
    """The LUN scan's commands (SCAN), each answered Good."""
    i, t, h = "initiator", "target", m.header()
    out = []
    for n, cdb in enumerate(SCAN):
        cdb16 = bytes.fromhex(cdb).ljust(16, b"\0")
        out.append((i, SEND_ONLY, h + m.scsi_command(0x40 + n, 1, cdb16, 0, 20 + n, 40 + n, read=True)))
        out.append((t, SEND_ONLY, h + m.scsi_response(0x40 + n, 0, 40 + n, 21 + n, 60 + n)))
    return out


def messages():
    """(sender, opcode, payload, RETH (va, rkey, length) or None) in capture order."""
    i, t, h = "initiator", "target", m.header()
    out = _login()
    out += [
        (i, SEND_ONLY, h + m.text(0x12, 2, 7, m.keys(("SendTargets", "All")))),
        (t, SEND_ONLY, h + m.text_response(0x12, 7, 3, 34, m.keys(("TargetName", "iqn.2026-12.org.example:disk1")))),
        (i, SEND_ONLY, h + m.nop_out(0x13, 3, 8, b"ping")),
        (t, SEND_ONLY, h + m.nop_in(0x13, 8, 3, 35, b"ping")),
    ]
    out += _io() + _scan()
    out.append((t, SEND_ONLY, h + m.data_in(0x24, 1, 12, 8, 40, 0, 0, bytes(64), status=0)))
    cmd = m.scsi_command(0x25, 7, m.cdb(m.READ_10, 0xFFFFFFF0, 1), 512, 7, 13, read=True)
    out.append((i, SEND_ONLY, m.header(read=(0xAB03, 0x7F0000400000)) + cmd))
    out.append((t, SEND_ONLY, h + m.scsi_response(0x25, 2, 13, 8, 40, residual=512, sense=SENSE, under=True)))
    out.append((i, SEND_ONLY, h + m.task_management(0x26, 1, 1, 0x25, 8, 14, 7)))
    out.append((t, SEND_ONLY, h + m.task_management_response(0x26, 1, 14, 8, 40)))
    whole = h + m.login(0x27, ISID, 0x1234, 2, 8, 15, 1, 3, OP_KEYS * 3)
    out += [(i, SEND_FIRST, whole[:256]), (i, SEND_LAST, whole[256:])]
    out.append((i, SEND_ONLY, m.hello(8) + bytes(48)))
    out.append((t, SEND_ONLY, m.hello(16, reply=True) + bytes(48)))
    out.append((i, SEND_ONLY, h + m.logout(0x28, 0, 1, 9, 16)))
    return out + [(t, SEND_ONLY, h + m.logout_response(0x28, 0, 16, 9, 41))]


def undeclared():
    """iSER PDUs on a queue pair no RDMA-CM exchange named: iSER only when declared with -d."""
    cmd = m.scsi_command(0x30, 0, m.cdb(m.TEST_UNIT_READY), 0, 1, 1)
    return [("initiator", SEND_ONLY, m.header() + cmd), ("initiator", SEND_ONLY, bytes([0x40]) + bytes(75))]


def write_capture(path, connect: bool = True, messages=messages) -> int:
    """The crafted conversation as a RoCEv2 pcap (after its RDMA-CM setup when `connect`); returns the
    number of frames."""
    ends = {"initiator": (INITIATOR, QP["initiator"]), "target": (TARGET, QP["target"])}
    entries = (setup() if connect else []) + messages()
    return write_rc_capture(path, entries, ends, {"initiator": 100, "target": 500})
