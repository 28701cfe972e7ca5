"""`rdma-pcap` backend: tcpdump on the verbs device through libpcap's RDMA sniffer (pcap-rdmasniff.c).

Interface `mlx5_N:PORT`; link type 1 on Ethernet ports, 247 on IB ports.  libpcap's messages are mapped to
what the user should do; drops come from tcpdump's closing "N packets dropped by kernel".
"""

import re
from typing import Optional

from ibwire.capture.backends.ibdump import _first_error
from ibwire.capture.backends.subproc import SubprocessCapture

HINTS = [
    ("CAP_NET_RAW may be required", "the RDMA sniffer needs CAP_NET_RAW; run as root"),
    ("root privileges may be required", "listing RDMA devices failed; run as root"),
    ("No kernel support for RDMA", "this kernel has no RDMA support, so the RDMA sniffer cannot run"),
    ("not a known RDMA device", "tcpdump does not know this RDMA device; `ibwire devices` lists them"),
    (
        "No such device exists",
        "this tcpdump's libpcap has no RDMA sniffer (needs libpcap 1.9 or later built "
        "with rdma-core); use the mellanox/tcpdump-rdma image or --backend verbs",
    ),
    ("Failed to create flow", "the device refused the sniffer flow (firmware or port type does not support it)"),
    ("Port number", "that port does not exist on the device"),
]


class RdmaPcap(SubprocessCapture):
    name = "rdma-pcap"
    tool = "tcpdump"

    def __init__(self, device: str, port: int, bpf: Optional[str] = None):
        super().__init__()
        self.device, self.port, self.bpf = device, port, bpf

    def command(self):
        return ["tcpdump", "-i", f"{self.device}:{self.port}", "-s", "0", "-U", "-n", "-w", "-"] + (
            [self.bpf] if self.bpf else []
        )

    def explain(self, stderr: str, rc: int) -> str:
        for needle, text in HINTS:
            if needle in stderr:
                return f"{text} (tcpdump said: {_first_error(stderr)})"
        return f"tcpdump on {self.device}:{self.port} failed (exit {rc}): {_first_error(stderr) or 'no message'}"

    def tool_drops(self, stderr: str) -> int:
        m = re.search(r"(\d+) packets? dropped by kernel", stderr)
        return int(m.group(1)) if m else 0
