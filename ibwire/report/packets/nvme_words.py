"""The NVMe-oF lines of `-V` that tshark 4.0's dissectors (packet-nvme.c, packet-nvme-rdma.c) word themselves
rather than from a field's registration: queue names, opcode and SGL descriptor names after the value, sizes
in bytes, the SQ size one more than the field (a 0's based value, NVMe-oF 1.1 §3.3), the keep-alive timeout
in ms, status code names, and the generated links and latencies in brackets.  Names as NVMe Base 2.0 gives
them (Figures 28, 116, 137, 141; SGL descriptor types §4.4), worded as Wireshark 4.0 words them."""

ADMIN = {
    0x00: "Delete SQ",
    0x01: "Create SQ",
    0x02: "Get Log Page",
    0x04: "Delete CQ",
    0x05: "Create CQ",
    0x06: "Identify",
    0x08: "Abort",
    0x09: "Set Features",
    0x0A: "Get Features",
    0x0C: "Async Event Request",
    0x0D: "Namespace Management",
    0x10: "Firmware Commit",
    0x11: "Firmware Image Download",
    0x15: "Namespace attach",
    0x18: "Keep Alive",
}
IO = {
    0x00: "Flush",
    0x01: "Write",
    0x02: "Read",
    0x04: "Write Uncorrectable",
    0x05: "Compare",
    0x08: "Write Zero",
    0x09: "Dataset Management",
    0x0D: "Reserve Register",
    0x0E: "Reserve Report",
    0x11: "Reserve Acquire",
    0x15: "Reserve Release",
}
SGL_TYPES = {
    0x0: "Data Block",
    0x1: "Bit Bucket",
    0x2: "Segment",
    0x3: "Last Segment",
    0x4: "Keyed Data Block",
    0x5: "Transport SGL Data Block",
    0xF: "Vendor Specific",
}
SGL_SUBTYPES = {0x0: "Address", 0x1: "Offset", 0xF: "Transport specific"}
STATUS = {  # generic command status (status code type 0)
    0x00: "Successful Completion",
    0x02: "Invalid Field in Command",
    0x03: "Command ID Conflict",
    0x04: "Data Transfer Error",
    0x07: "Command Abort Requested",
    0x0B: "Invalid Namespace or Format",
    0x0C: "Command Sequence Error",
}
LOG_PAGES = {
    0x01: "Error Information",
    0x02: "SMART/Health Information",
    0x03: "Firmware Slot Information",
    0x04: "Changed Namespace List",
    0x05: "Commands Supported and Effects",
    0x06: "Device Self-test",
    0x07: "Telemetry Host-Initiated",
    0x08: "Telemetry Controller-Initiated",
    0x09: "Endurance Group Information",
    0x0A: "Predictable Latency Per NVM Set",
    0x0B: "Predictable Latency Event Aggregate",
    0x0C: "Asymmetric Namespace Access",
    0x0D: "Persistent Event Log",
    0x0E: "LBA Status Information",
    0x0F: "Endurance Group Event Aggregate",
    0x70: "NVMeOF Discovery",
    0x80: "Reservation Notification",
    0x81: "Sanitize Status",
}

# Items tshark shows in brackets: links to other frames and times it worked out.
GENERATED = {
    "nvme-rdma.cmd.qid",
    "nvme.fabrics.cmd_pkt",
    "nvme.fabrics.cqe_pkt",
    "nvme.fabrics.data_req",
    "nvme.fabrics.cmd_latency",
    "nvme.cmd_pkt",
    "nvme.cqe_pkt",
    "nvme.data_req",
    "nvme.cmd_latency",
    "nvme-rdma.read_from_host_prev",
    "nvme-rdma.write_to_host_prev",
}
TITLES = {"nvme.fabrics.cmd.connect.sgl1": "SGL1", "nvme.cmd.dsm": "DSM Flags"}  # containers without a field
ACCESS_FREQUENCY = {  # packet-nvme.c's dsm_acc_freq_tbl and dsm_acc_lat_tbl, its slip included
    0: "No frequency",
    1: "Typical",
    2: "Infrequent Read/Write",
    3: "Infrequent Writes, Frequent Reads",
    4: "Frequent Writes, Infrequent Reads",
    5: "Frequent Read/Write",
    6: "One time read",
    7: "Speculative read",
    8: "Likely tobe overwritten",
}
ACCESS_LATENCY = {0: "None", 1: "Idle (Longer)", 2: "Normal (Typical)", 3: "Low (Smallest)"}


def _n(v) -> int:
    return v if isinstance(v, int) else int(v, 16) if not str(v).startswith("0x") else int(v, 0)


def _queue(v) -> str:
    n = int(v, 0) if isinstance(v, str) else v
    return f"{n} ({'IOQ' if n else 'AQ'})"


def _after(names: dict):
    return lambda v: f"0x{_n(v):x} {names.get(_n(v), 'Reserved')}"


def _status(v) -> str:
    n = _n(v)
    return f"0x{n:02x} ({STATUS[n]})" if n in STATUS else f"0x{n:02x}"


WORDED = {
    "nvme-rdma.cmd.qid": _queue,
    "nvme.fabrics.cmd.connect.qid": _queue,
    "nvme.fabrics.cmd.connect.sqsize": lambda v: str(int(v, 0) + 1),
    "nvme.fabrics.cmd.connect.kato": lambda v: f"{int(v, 0)}ms",
    "nvme.fabrics.cmd.opc": lambda v: f"0x{_n(v):x} (Fabric Command)",
    "nvme.cmd.sgl.type": _after(SGL_TYPES),
    "nvme.cmd.sgl.subtype": _after(SGL_SUBTYPES),
    "nvme.cmd.dsm.access_freq": _after(ACCESS_FREQUENCY),
    "nvme.cmd.dsm.access_lat": _after(ACCESS_LATENCY),
    "nvme.cqe.status.sc": _status,
    "nvme.fabrics.prop_get_set.cc.mps": lambda v: f"0x{int(v, 0):x} ({4096 << int(v, 0)} bytes)",
    "nvme.fabrics.prop_get_set.cc.iosqes": lambda v: f"0x{int(v, 0):x} ({1 << int(v, 0)} bytes)",
    "nvme.fabrics.prop_get_set.cc.iocqes": lambda v: f"0x{int(v, 0):x} ({1 << int(v, 0)} bytes)",
    "nvme.cmd.get_logpage.dword10.id": lambda v: f"{LOG_PAGES.get(int(v, 0), 'Reserved')} (0x{int(v, 0):x})",
    "nvme.fabrics.cmd_latency": lambda v: f"{float(v):.3f} ms",  # 0.040 ms, as tshark 4.0 and 4.4 print it
    "nvme.cmd_latency": lambda v: f"{float(v):.3f} ms",
}


def opcode(value, admin: bool) -> str:
    """An admin or I/O command's opcode as tshark words it: `0x02 Get Log Page`."""
    n = _n(value)
    return f"0x{n:02x} {(ADMIN if admin else IO).get(n, 'Unknown')}"


def title(key: str, items: list):
    """The title of NVMe container `key` holding `items`, or None: `Cqe (For Cmd: Connect)` (a fabrics
    completion, titled by the command it answers: its rows tell), `SGL1`, the nvme layer inside an RDMA READ
    response's tree."""
    if key == "nvme":  # nested in an RDMA READ response's tree
        return heading(items)
    if key != "nvme.fabrics.cqe":
        return TITLES.get(key)
    keys = {k for k, _ in items}
    for prefix, name in (
        ("nvme.fabrics.cqe.connect.", "Connect"),
        ("nvme.fabrics.cqe.prop_set.", "Property Set"),
        ("nvme.fabrics.prop_get_set.data", "Property Get"),
    ):
        if any(k.startswith(prefix) for k in keys):
            return f"Cqe (For Cmd: {name})"
    return "Cqe"


def heading(items: list) -> str:
    """The NVMe layer's title: `NVM Express (Cmd)` or `NVM Express (Cqe)`."""
    keys = {k for k, _ in items}
    return "NVM Express" + (" (Cqe)" if "nvme.cqe.sqhd" in keys else " (Cmd)" if "nvme.cmd.opc" in keys else "")
