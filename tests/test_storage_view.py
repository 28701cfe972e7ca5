"""`ibwire stats --storage` on the public NVMe-oF captures: each command's latency is what tshark 4.4
reports for it (nvme.cmd_latency, nvme.fabrics.cmd_latency), the bytes of a transfer are what its RDMA READ
responses carry by tshark's frame lengths, the Parquet export holds the same table, and the bulk path never
loads scapy."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
from one_process import run_ibwire  # forked from a process that imported ibwire: the output is the point

DISCOVER = "m3_nvme_nvme-discover.pcap"
ECHO = "m3_nvme_host-echo_dump.pcap"


def _storage(capture, *args):
    done = run_ibwire("stats", "--storage", "--format", "json", *args, capture)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_latency_per_command_is_tshark_44s(tshark44, public_dir):
    capture = public_dir / DISCOVER
    out = tshark44(
        capture,
        "-Y",
        "nvme.cmd_latency || nvme.fabrics.cmd_latency",
        "-T",
        "fields",
        "-e",
        "frame.number",
        "-e",
        "nvme.cmd_latency",
        "-e",
        "nvme.fabrics.cmd_latency",
    )
    theirs = {}
    for line in out.splitlines():
        frame, a, b = line.split("\t")
        theirs[int(frame)] = float(a or b)
    ours = {c["completion"]: c["latency_us"] / 1000 for c in _storage(capture)["commands"] if c["completion"]}
    assert theirs and ours.keys() == theirs.keys()
    assert all(abs(ours[f] - theirs[f]) < 0.001 for f in theirs)  # tshark rounds to the microsecond


def test_transfer_bytes_and_summary_on_declared_queues(tshark, public_dir):
    capture = public_dir / ECHO
    res = _storage(capture, "-d", "nvme-rdma")
    write = next(c for c in res["commands"] if c["submission"] == 21)
    assert (write["opcode"], write["first_data"], write["last_data"], write["completion"]) == ("Write", 23, 43, 44)
    lengths = subprocess.run(
        [
            tshark,
            "-r",
            str(capture),
            "-Y",
            "frame.number >= 24 && frame.number <= 43",
            "-T",
            "fields",
            "-e",
            "frame.len",
            "-e",
            "infiniband.aeth.msn",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4, and the AETH of a first or last READ response
    moved = sum(int(n) - 58 - (4 if msn else 0) for n, msn in (line.split("\t") for line in lengths))
    assert write["bytes"] == moved == write["blocks"] * 512
    by_op = {r["opcode"]: r for r in res["by_opcode"]}
    assert by_op["Write"]["commands"] == by_op["Write"]["completed"] == 3
    assert sum(r["commands"] for r in res["by_queue"]) == len(res["commands"])
    assert res["errors"] == []
    assert by_op["Write"]["latency_p50_us"] <= by_op["Write"]["latency_p99_us"] <= by_op["Write"]["latency_max_us"]


def test_parquet_holds_the_command_table(public_dir, tmp_path):
    capture = public_dir / ECHO
    done = run_ibwire(
        "export", "-d", "nvme-rdma", capture, "-o", tmp_path / "p.parquet", "--storage", tmp_path / "c.parquet"
    )
    assert done.returncode == 0, done.stderr
    assert pq.read_table(tmp_path / "c.parquet").to_pylist() == _storage(capture, "-d", "nvme-rdma")["commands"]


def test_no_setup_no_commands_said_so(public_dir):
    res = run_ibwire("stats", "--storage", public_dir / ECHO, unwrapped=True)
    assert res.returncode == 0 and "no NVMe-oF command found" in res.stdout


def test_bulk_path_never_loads_scapy(public_dir):
    code = (
        "import sys; from ibwire.analyze.storage import analyse; "
        f"r = analyse({str(public_dir / DISCOVER)!r}); assert r['commands']; "
        "assert not [m for m in sys.modules if m.startswith('scapy')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flows_storage_is_the_same_view(public_dir):
    """`ibwire flows --storage` shows the storage view `stats --storage` shows, -d included; -d alone is refused."""
    capture = public_dir / ECHO
    flows = run_ibwire("flows", "--storage", "-d", "nvme-rdma", "--format", "json", capture)
    assert flows.returncode == 0, flows.stderr
    assert json.loads(flows.stdout) == _storage(capture, "-d", "nvme-rdma")
    refused = run_ibwire("flows", "-d", "nvme-rdma", capture)
    assert refused.returncode == 2 and "-d applies to --storage" in refused.stderr
