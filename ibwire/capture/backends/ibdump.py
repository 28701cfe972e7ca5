"""`ibdump` backend (Mellanox/ibdump, now in mstflint): the firmware port sniffer of an IB port.

Command line and messages from ibdump.c usage() and error paths: `-d DEV -i PORT -w - -b LOG2`; with
`-w -` it writes pcap (DLT_ERF 197, ERF type 21 records starting at the LRH) to stdout; SIGINT detaches
the sniffer and prints "Captured: N packets, M bytes".  Never SIGKILL it: the sniffer would stay attached.
"""

from ibwire.capture.backends.subproc import SubprocessCapture

HINTS = [
    (
        "Unsupported HW device id",
        "ibdump was built without firmware tools (mstflint/MFT); install the ibdump "
        "shipped with MFT, DOCA-host or mstflint",
    ),
    (
        "Failed to open mst device",
        "ibdump cannot open the mst device; run as root and load mst (`mst start`) or install mstflint",
    ),
    ("does not support sniffing", "the adapter firmware is too old for ibdump; update the firmware"),
    (
        "Failed to set port sniffer",
        "the firmware refused the port sniffer (another sniffer may be attached; "
        "stop other ibdump runs or reload the driver)",
    ),
    ("Can not dump Infiniband traffic without an ERF header", "ibdump needs ERF output for IB ports"),
]


class Ibdump(SubprocessCapture):
    name = "ibdump"
    tool = "ibdump"

    def __init__(self, device: str, port: int, burst_log2: int = 14):
        super().__init__()
        self.device, self.port, self.burst_log2 = device, port, burst_log2

    def command(self):
        return ["ibdump", "-d", self.device, "-i", str(self.port), "-w", "-", "-b", str(self.burst_log2)]

    def explain(self, stderr: str, rc: int) -> str:
        for needle, text in HINTS:
            if needle in stderr:
                return f"{text} (ibdump said: {_first_error(stderr)})"
        return f"ibdump on {self.device} port {self.port} failed (exit {rc}): {_first_error(stderr) or 'no message'}"


def _first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("-E-") or "fail" in ln.lower() or "error" in ln.lower():
            return ln
    return lines[0] if lines else ""
