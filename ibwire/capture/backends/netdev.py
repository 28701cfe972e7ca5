"""`netdev` backend: capture any interface the kernel sees (IPoIB, Soft-RoCE, veth, host VF) with dumpcap.

Nothing is armed; the engine (ibwire.capture.dumpcap) reads the interface through libpcap's TPACKET ring.
"""

from typing import List


class Netdev:
    name = "netdev"

    def __init__(self, iface: str):
        self.capture_dev = iface
        self.notes: List[str] = [f"reading interface {iface}"]

    def arm(self, journal):
        pass

    def vanished(self):
        return None  # dumpcap itself notices the interface going
