"""The simulated-fabric scenario shared by tests/test_ibsim_*.py and tests/test_fabric_*.py.

ibsim runs small.topo; a capture thread records while opensm programs partitions.conf and
smpquery / saquery / perfquery / ibnetdiscover run; a tool attaching at Hca2 with SIM_SET_ISSM makes ibsim
send trap 144 to the SM.  After the capture stops, `smpquery` reads the programmed state as ground truth.
"""

import os
import threading
from pathlib import Path

from ibwire.capture.ibsim import capture_ibsim
from ibwire.lab.simfabric import SimFabric

HERE = Path(__file__).resolve().parent
TOPOLOGY = HERE / "small.topo"
PARTITIONS = HERE / "partitions.conf"
SM_HOST = "Hca1"
TOOLS = [
    ["smpquery", "nodeinfo", "3"],
    ["smpquery", "-D", "portinfo", "0,1,3"],
    ["smpquery", "pkeys", "4"],
    ["saquery", "-N"],
    ["perfquery", "2"],
    ["ibnetdiscover"],
    ["sminfo"],
]


def run(workdir: str, link: str = "erf", tools: list = TOOLS) -> dict:
    out = os.path.join(workdir, f"ibsim-{link}.pcap")
    with SimFabric(str(TOPOLOGY), workdir=workdir) as fab:
        stop, ready, stats = threading.Event(), threading.Event(), {}
        t = threading.Thread(
            target=lambda: stats.update(capture_ibsim(out, link=link, stop=stop, port=fab.port, ready=ready)),
            daemon=True,
        )
        t.start()
        try:
            assert ready.wait(10), "capture_ibsim did not start"
            fab.start_opensm(str(PARTITIONS), host=SM_HOST)
            outputs = {" ".join(c): fab.run(c, host="Hca2") for c in tools}
            env_trap = fab.env("Hca2")
            env_trap["SIM_SET_ISSM"] = "1"
            import subprocess

            try:  # attaching with IsSM set is what makes ibsim send trap 144; the query's answer is not needed
                subprocess.run(
                    ["smpquery", "-t", "2000", "nodedesc", "1"],
                    env=env_trap,
                    capture_output=True,
                    timeout=10,
                    cwd=workdir,
                )
            except subprocess.TimeoutExpired:
                pass
            threading.Event().wait(0.3)  # let the last datagrams reach the socket
        finally:
            stop.set()
            t.join(10)
        truth = {}
        for lid in (1, 2, 3, 4):
            truth[("pkeys", lid)] = fab.run(["smpquery", "pkeys", str(lid)])
            truth[("nodeinfo", lid)] = fab.run(["smpquery", "nodeinfo", str(lid)])
        for swport in (1, 2, 3):
            truth[("pkeys-sw", swport)] = fab.run(["smpquery", "pkeys", "2", str(swport)])
        return {"path": out, "stats": stats, "outputs": outputs, "truth": truth, "port": fab.port}
