"""Issue 31, real traffic: the kernel's NFS server (knfsd) and client over Soft-RoCE, in the RDMA lab's guests
(the session's lab of tests/test_lab_rdma.py, booted once; g0 and g1 are tenant A, VLAN 10).

g0 is the server: nfs-kernel-server's rpcbind, exportfs and rpc.mountd, and rpc.nfsd listening on the RDMA
transport (port 20049, svcrdma), exporting a tmpfs (the guests' 9p/overlay root is not exportable).  g1 is the
client: `mount -t nfs -o proto=rdma,port=20049,vers=3,nolock,noacl` (no NLM or NFSACL calls; the MOUNT protocol
itself goes over TCP); dd writes 2 MiB of random data to a file in 64 KiB O_DIRECT blocks (one NFS WRITE each)
and reads it back the same way.  `ibwire capture --vf 1` records g1's representor throughout; then the client
unmounts, the server stops, and both unload the modules they loaded.

Ground truth is what the run itself reports: dd's summaries, the client's /proc/self/mountstats (calls per
procedure, bytes the server read and wrote), the file read back, and tshark 4.4.
"""

import json
import re
import sys
from collections import Counter

import pytest
from rpcrdma_frames import PROTOCOLS
from storage_oracle import leaves
from test_lab_nvmeof import _dd
from test_lab_rdma import Capture, check_capture

BS, BLOCKS = 65536, 32  # 2 MiB, one NFS WRITE / READ per block (rsize = wsize = 64 KiB)

SERVER = """set -e
modprobe -a nfsd rpcrdma
mkdir -p /srv/ibwnfs
mount -t tmpfs -o size=16m ibwnfs /srv/ibwnfs
grep -q ' /proc/fs/nfsd ' /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd
rpcbind -w
exportfs -o rw,no_root_squash,insecure,no_subtree_check,fsid=1 "$1/24:/srv/ibwnfs"
rpc.mountd
rpc.nfsd -N 4 --rdma=20049 1
grep -q '^rdma 20049$' /proc/fs/nfsd/portlist
"""
SERVER_DOWN = """rpc.nfsd 0; exportfs -ua; kill $(pidof rpc.mountd rpcbind)
umount /proc/fs/nfsd; umount /srv/ibwnfs; rmdir /srv/ibwnfs
modprobe -r nfsd rpcrdma
"""
CLIENT = """set -e
modprobe rpcrdma
mkdir -p /mnt/ibwnfs
mount -t nfs -o proto=rdma,port=20049,vers=3,nolock,noacl,mountproto=tcp "$1:/srv/ibwnfs" /mnt/ibwnfs
head -c $(($2 * $3)) /dev/urandom > /tmp/nfs-src.bin
dd if=/tmp/nfs-src.bin of=/mnt/ibwnfs/f bs=$2 oflag=direct 2>&1
dd if=/mnt/ibwnfs/f of=/tmp/nfs-back.bin bs=$2 iflag=direct 2>&1
echo "IBW sums $(sha256sum /tmp/nfs-src.bin /tmp/nfs-back.bin | cut -d' ' -f1 | tr '\\n' ' ')"
sed -n '\\# /mnt/ibwnfs #,/^$/p' /proc/self/mountstats
"""
CLIENT_DOWN = """umount /mnt/ibwnfs; rmdir /mnt/ibwnfs; rm -f /tmp/nfs-src.bin /tmp/nfs-back.bin
modprobe -r nfsv3 nfs lockd rpcrdma
"""
LEFT = """grep -E ' nfs|ibwnfs' /proc/mounts; lsmod | grep -E '^(nfsd|nfs|nfsv3|lockd|rpcrdma) '; pidof rpcbind rpc.mountd
ls -d /srv/ibwnfs /mnt/ibwnfs /tmp/nfs-src.bin /tmp/nfs-back.bin 2>/dev/null; true
"""


def _mountstats(out: str) -> dict:
    """/proc/self/mountstats' (statvers 1.1) bytes line (server read and write bytes) and per-op counts."""
    words = re.search(r"^\s*bytes:\s+(.*)$", out, re.M).group(1).split()
    ops = {m[1]: int(m[2]) for m in re.finditer(r"^\s*([A-Z_]+): (\d+) ", out, re.M)}
    return {"server_read": int(words[4]), "server_written": int(words[5]), "ops": {k: v for k, v in ops.items() if v}}


def _run(rlab, path):
    """Server up on g0, the client's run on g1 under capture, server down: what the client reported."""
    rlab.run("g0", "sh", "-c", SERVER, "sh", rlab.ip["g0"])
    try:
        with Capture(rlab, 1, path) as cap:
            out = rlab.run("g1", "sh", "-c", CLIENT, "sh", rlab.ip["g0"], str(BS), str(BLOCKS)).stdout
    finally:
        rlab.run("g1", "sh", "-c", CLIENT_DOWN, check=False)
        rlab.run("g0", "sh", "-c", SERVER_DOWN, check=False)
    left = {g: rlab.run(g, "sh", "-c", LEFT).stdout for g in ("g0", "g1")}
    sums = next(line.split()[2:] for line in out.splitlines() if line.startswith("IBW sums "))
    return {"cap": cap, "dd": _dd(out), "sums": sums, "stats": _mountstats(out), "left": left}


@pytest.fixture(scope="module")
def nfs(rlab, tmp_path_factory):
    path = tmp_path_factory.mktemp("nfsrdma") / "nfs-rdma.pcap"
    run = _run(rlab, path)
    run.update(path=path, json=rlab.cli("decode", "-T", "json", str(path)).stdout)
    run["storage"] = json.loads(rlab.cli("stats", "--storage", "--format", "json", str(path)).stdout)
    print(f"\nNFS over RDMA run: dd {run['dd']}, mountstats {run['stats']}", file=sys.stderr)
    return run


def test_dd_moved_its_file_and_the_capture_is_complete(nfs):
    """dd's summaries; the file read back is the one written; every frame the representor counted is in the
    capture, every ICRC good."""
    assert nfs["dd"] == [(BLOCKS, BLOCKS * BS)] * 2, nfs["dd"]
    assert len(set(nfs["sums"])) == 1 and len(nfs["sums"]) == 2, nfs["sums"]
    check_capture(nfs["cap"], nfs["path"], tshark=False)


def test_nothing_is_left_in_the_guests(nfs):
    """After the run no NFS mount, module, daemon or file of the test's remains in either guest."""
    assert nfs["left"] == {"g0": "", "g1": ""}, nfs["left"]


def test_storage_view_counts_the_clients_calls_and_bytes(nfs):
    """`stats --storage`: every procedure the client's mountstats counted is an rpc row with as many calls, all
    replied with success; READ and WRITE moved (through their chunks) the bytes the server read and wrote,
    which are dd's."""
    rows = {r["procedure"]: r for r in nfs["storage"]["rpc_by_procedure"]}
    stats = nfs["stats"]
    assert {p.removeprefix("NFSv3 "): r["commands"] for p, r in rows.items()} == stats["ops"], (rows, stats)
    assert all(r["completed"] == r["commands"] and r["errors"] == 0 for r in rows.values()), rows
    calls = nfs["storage"]["rpc_calls"]
    assert all(c["status"] == "success" and c["latency_us"] > 0 for c in calls)
    for op, key in (("READ", "server_read"), ("WRITE", "server_written")):
        moved = sum(c["bytes"] for c in calls if c["procedure"] == f"NFSv3 {op}")
        assert moved == stats[key] == BLOCKS * BS, (op, moved, stats)


def _same(name: str, theirs: list, ours: list) -> bool:
    """The same values (tshark 4.4 repeats the RPC layer of a READ reply whose data came in a write chunk), reply
    times to the microsecond ibwire rounds them to."""
    if name == "rpc.time":
        return abs(float(theirs[0]) - float(ours[0])) <= 1e-6
    return sorted(set(theirs)) == sorted(set(ours))


def test_rpcrdma_and_nfs_fields_agree_with_tshark_44(nfs, tshark44):
    """Every rpcordma / rpc / nfs value tshark 4.4 and ibwire both show on the kernels' traffic is the same, and
    ibwire shows at least 95% of tshark's; both find every RPC-RDMA message and every RPC call and reply.  Not
    shown (docs/storage.md): a WRITE call's data bytes and tshark's reassembly of its read chunk
    (rpcordma.fragment …), and RPC over TCP (MOUNT, rpcbind)."""
    theirs = leaves(tshark44(nfs["path"], "-T", "json"), PROTOCOLS)
    ours = leaves(nfs["json"], PROTOCOLS)
    compared = [k for k in theirs if k in ours]
    wrong = [(k, theirs[k], ours[k]) for k in compared if not _same(k[1], theirs[k], ours[k])]
    assert not wrong, wrong[:10]
    for key in ("rpcordma.xid", "rpc.xid", "nfs.procedure_v3"):  # ibwire alone shows no RPC over TCP (MOUNT)
        assert {f for f, k in theirs if k == key and (f, "rpcordma.xid") in theirs} <= {f for f, k in ours if k == key}
    missing = Counter(k[1] for k in theirs if k not in ours)
    print(
        f"\ntshark 4.4: {len(theirs)} rpcordma/rpc/nfs fields in {len({f for f, _ in theirs})} frames; ibwire shows "
        f"{len(compared)} of them ({len(compared) / len(theirs):.1%}) with the same values; not shown: {dict(missing)}"
    )
    assert len(compared) >= 0.95 * len(theirs), (len(compared), len(theirs))
