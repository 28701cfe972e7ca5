"""`ibwire lab samples DIR`: record captures/rxe-*.pcap from a running RDMA lab, each with its rxe counters.

For each sample, guest g1 (client) talks to g0 (server) while `ibwire capture --vf 1` records g1's representor
from the PF host namespace; both guests' rxe hw_counters are read before and after, and their differences are
written beside the capture as rxe-NAME.counters.json with the commands that made the traffic.
"""

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import List, Optional

from ibwire.errors import UserError
from ibwire.files.outfile import output_file
from ibwire.lab.rdma import control
from ibwire.lab.rdma import lab as rlab

PERF = ["-d", "rxe0", "-F", "-n", "20", "-u", "20"]  # -u 20: a 4 s retransmission timeout, none spurious
# name: (what it shows, server argv, client argv (the server's address is appended), netem on g1 or None)
SAMPLES = {
    "rc-write": (
        "RC RDMA WRITE, 20 x 4 KiB (FIRST/MIDDLE/MIDDLE/LAST at IB MTU 1024) and ACKs",
        ["ib_write_bw", *PERF, "-s", "4096"],
        None,
    ),
    "rc-read": (
        "RC RDMA READ, 20 x 4 KiB: READ requests and FIRST/MIDDLE/MIDDLE/LAST responses",
        ["ib_read_bw", *PERF, "-s", "4096"],
        None,
    ),
    "rc-send": ("RC SEND, 20 x 4 KiB, and ACKs", ["ib_send_bw", *PERF, "-s", "4096"], None),
    "uc-write": (
        "UC RDMA WRITE, 20 x 2 KiB (FIRST/LAST), no ACKs",
        ["ib_write_bw", *PERF, "-c", "UC", "-s", "2048"],
        None,
    ),
    "ud-send": ("UD SEND ONLY with DETH, 20 x 512 B", ["ib_send_bw", *PERF, "-c", "UD", "-s", "512"], None),
    "atomic-fetch-add": ("RC FetchAdd x 20 and ATOMIC Acknowledges", ["ib_atomic_bw", *PERF], None),
    "atomic-cmp-swap": ("RC CmpSwap x 20 and ATOMIC Acknowledges", ["ib_atomic_bw", *PERF, "-A", "CMP_AND_SWAP"], None),
    "rdma-cm": (
        "rping over RDMA-CM: CM REQ/REP/RTU and DREQ/DREP on QP1, then 5 x (SEND, READ, SEND, SEND, "
        "WRITE, SEND) of 100 B",
        ["rping", "-C", "5", "-S", "100"],
        None,
    ),
    "rc-write-loss2": (
        "RC RDMA WRITE, 100 x 4 KiB with netem dropping 2% of what g1 sends: PSN gaps (the drops "
        "happen before the wire), PSN sequence error NAKs, go-back-N retransmissions",
        ["ib_write_bw", "-d", "rxe0", "-F", "-n", "100", "-s", "4096"],
        "2%",
    ),
}


def _argv(lab: dict, name: str, server: bool) -> List[str]:
    g0, g1 = lab["vfs"][0], lab["vfs"][1]
    argv = list(SAMPLES[name][1])
    if argv[0] == "rping":
        return (
            argv[:1]
            + (["-s", "-a", g0["ips"][0]] if server else ["-c", "-a", g0["ips"][0], "-I", g1["ips"][0]])
            + argv[1:]
        )
    me = g0 if server else g1
    return argv + ["-x", str(me["gid_index"])] + ([] if server else [g0["ips"][0]])


def _capture(lab: dict, path: Path) -> subprocess.Popen:
    p = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            lab["pf_netns"],
            sys.executable,
            "-c",
            "from ibwire.cli import main; main()",
            "capture",
            "--vf",
            "1",
            "-w",
            str(path),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stderr:
        if line.startswith("ibwire: capturing "):
            return p
    p.wait()
    raise UserError(f"the capture of {path.name} did not start")


def record(prefix: str, outdir: str, only: Optional[List[str]] = None, say=print):
    lab = rlab.load(prefix)
    if len(lab["vfs"]) < 2 or lab["vfs"][0]["vlan"] != lab["vfs"][1]["vlan"]:
        raise UserError("the samples need guests g0 and g1 in one VLAN; `ibwire lab up --rdma` without --vlan")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name in only or list(SAMPLES):
        if name not in SAMPLES:
            raise UserError(f"no sample {name}; choose from {', '.join(SAMPLES)}")
        what, _, loss = SAMPLES[name]
        before = {g: control.counters(prefix, g) for g in ("g0", "g1")}
        if loss:
            control.faults(prefix, "g1", loss, None, None, None, False)
        pcap = out / f"rxe-{name}.pcap"
        cap = _capture(lab, pcap)
        try:
            rc = _pair(prefix, _argv(lab, name, True), _argv(lab, name, False))
        finally:
            cap.send_signal(signal.SIGINT)
            summary = [line.strip() for line in cap.stderr if "captured" in line][-1:]
            cap.wait()
            if loss:
                control.faults(prefix, "g1", None, None, None, None, True)
        if rc:
            raise UserError(f"sample {name}: the traffic failed (exit status {rc})")
        after = {g: control.counters(prefix, g) for g in ("g0", "g1")}
        doc = {
            "sample": name,
            "shows": what,
            "server g0": " ".join(_argv(lab, name, True)),
            "client g1": " ".join(_argv(lab, name, False)),
            "netem on g1": f"loss {loss}" if loss else None,
            "capture": f"ibwire capture --vf 1 (representor of g1): {summary[0] if summary else ''}",
            "rxe_counters_delta": {
                g: {k: v - before[g].get(k, 0) for k, v in after[g].items() if v != before[g].get(k, 0)} for g in after
            },
        }
        with output_file(out / f"rxe-{name}.counters.json", "w") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        say(f"{pcap}: {doc['capture']}")


def _pair(prefix: str, server: List[str], client: List[str]) -> int:
    """Server in g0 (once it listens), client in g1; the first non-zero exit status, else 0."""
    ready = "ss -ltn | grep -q ':18515 ' || rdma res show cm_id 2>/dev/null | grep LISTEN | grep -q \" pid $p \""
    cmd = f"{' '.join(server)} & p=$!; until {ready}; do sleep 0.1; done; echo IBW-LISTENING >&2; wait $p"
    listening = threading.Event()
    rcs = {}

    class Watch:
        def write(self, data: bytes):
            if b"IBW-LISTENING" in data:
                listening.set()

        def flush(self):
            pass

    def serve():
        rcs["server"] = control.run(prefix, "g0", ["sh", "-c", cmd], 300, Watch(), Watch())
        listening.set()

    t = threading.Thread(target=serve)
    t.start()
    listening.wait(300)
    rcs["client"] = control.run(prefix, "g1", client, 300, Watch(), Watch())
    t.join()
    return rcs["client"] or rcs.get("server", 1)
