"""ibdump and rdma-pcap (tcpdump on an RDMA device) need a ConnectX; these tests run the capture against
stand-in executables (tests/standin/) on a fake sysfs tree to check exact command lines, SIGINT stop,
output link types, VF filtering and error messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ibwire.files import iter_frames

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "standin"))
import fake_sysfs  # noqa: E402


def _run(tmp_path, args, link_layer="InfiniBand", **env_extra):
    env = fake_sysfs.standin_env(tmp_path, link_layer, **env_extra)
    r = subprocess.run(
        [sys.executable, "-c", "from ibwire.cli import main; main()"] + args,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = tmp_path / "argv.log"
    argv = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r, argv


def test_ibdump_standin_command_line_erf_output_and_clean_stop(tmp_path):
    out = tmp_path / "ib.pcap"
    r, argv = _run(
        tmp_path,
        ["capture", "--pf", "mlx5_0", "-w", str(out), "--duration", "1"],
        STANDIN_LIDS="0x3>0x12,0x12>0x3,0x5>0x6",
    )
    assert r.returncode == 0, r.stderr
    assert argv == [["ibdump", "-d", "mlx5_0", "-i", "1", "-w", "-", "-b", "14"]]
    assert "backend ibdump" in r.stderr and "Traceback" not in r.stderr
    frames = list(iter_frames(str(out)))
    assert [f.linktype for f in frames] == [197, 197, 197]
    tshark = subprocess.run(
        ["tshark", "-r", str(out), "-T", "fields", "-e", "infiniband.lrh.dlid"], capture_output=True, text=True
    )
    assert tshark.stdout.split() == ["18", "3", "6"]
    assert not list((tmp_path / "run").glob("capture-*.json"))  # journal replayed and removed


def test_ibdump_standin_vf_filter_keeps_only_the_vfs_lid_and_link_ib(tmp_path):
    out = tmp_path / "vf1.pcap"
    r, _ = _run(
        tmp_path,
        ["capture", "--vf", "1", "--link", "ib", "-w", str(out), "--duration", "1"],
        STANDIN_LIDS="0x3>0x12,0x7>0x8,0x12>0x3,0x9>0x3",
    )
    assert r.returncode == 0, r.stderr
    frames = list(iter_frames(str(out)))
    assert len(frames) == 2 and all(f.linktype == 247 for f in frames)
    lids = {(int.from_bytes(f.data[6:8], "big"), int.from_bytes(f.data[2:4], "big")) for f in frames}
    assert lids == {(0x3, 0x12), (0x12, 0x3)}
    assert "LID 0x12" in r.stderr


def test_ibdump_standin_count_stops_with_sigint(tmp_path):
    out = tmp_path / "c.pcap"
    r, _ = _run(tmp_path, ["capture", "--pf", "mlx5_0", "-c", "2", "-w", str(out)], STANDIN_LIDS="1>2,3>4,5>6")
    assert r.returncode == 0, r.stderr
    assert len(list(iter_frames(str(out)))) == 2


def test_ibdump_standin_error_is_one_sentence(tmp_path):
    r, _ = _run(
        tmp_path,
        ["capture", "--pf", "mlx5_0", "-w", str(tmp_path / "x.pcap")],
        STANDIN_FAIL="-E- Unsupported HW device id (0)",
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "built without firmware tools" in r.stderr
    assert not list((tmp_path / "run").glob("capture-*.json"))


def test_rdma_pcap_standin_command_line_bpf_and_drops(tmp_path):
    out = tmp_path / "roce.pcapng"
    root = tmp_path / "sys"
    fake_sysfs.build(root, "Ethernet")
    r, argv = _run(
        tmp_path,
        ["capture", "--pf", "mlx5_0", "--backend", "rdma-pcap", "-w", str(out), "--duration", "1"],
        link_layer="Ethernet",
        STANDIN_MACS="02:00:00:00:00:01,02:00:00:00:00:02",
        STANDIN_DROPS="7",
    )
    assert r.returncode == 0, r.stderr
    assert argv == [["tcpdump", "-i", "mlx5_0:1", "-s", "0", "-U", "-n", "-w", "-"]]
    assert "backend drops: 7" in r.stderr
    cap = subprocess.run(
        ["tshark", "-r", str(out), "-T", "fields", "-e", "frame.interface_description"], capture_output=True, text=True
    )
    assert cap.stdout.split("\n")[0] == "device mlx5_0 port 1 VF - backend rdma-pcap"


def test_rdma_pcap_standin_cap_net_raw_message(tmp_path):
    r, _ = _run(
        tmp_path,
        ["capture", "--pf", "mlx5_0", "--backend", "rdma-pcap", "-w", str(tmp_path / "x.pcap")],
        link_layer="Ethernet",
        STANDIN_FAIL="tcpdump: mlx5_0:1: Failed to create QP - CAP_NET_RAW may be required",
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "needs CAP_NET_RAW" in r.stderr


def test_extcap_lists_the_pf_ports_and_vfs_of_a_sysfs_tree_with_their_link_types(tmp_path):
    root = fake_sysfs.build(tmp_path / "sys", "InfiniBand")
    env = dict(os.environ, IBWIRE_SYSFS_ROOT=str(root), IBWIRE_RUN_DIR=str(tmp_path / "run"))

    def ext(*args):
        r = subprocess.run(
            [sys.executable, "-c", "from ibwire.cli import main; main()", "extcap", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0 and r.stderr == "", r.stderr
        return r.stdout.splitlines()

    lines = ext("--extcap-interfaces", "--extcap-version=4.0")
    assert lines[0].startswith("extcap {version=")
    assert "interface {value=ibwire-mlx5_0-vf1}{display=ibwire: VF 1 of mlx5_0}" in lines
    assert "interface {value=ibwire-mlx5_0-p1}{display=ibwire: mlx5_0 port 1 (InfiniBand)}" in lines
    assert ext("--extcap-dlts", "--extcap-interface", "ibwire-mlx5_0-vf1") == [
        "dlt {number=197}{name=ERF}{display=ibwire: VF 1 of mlx5_0}"
    ]  # ibdump's ERF records
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ibwire.cli import main; main()",
            "extcap",
            "--extcap-dlts",
            "--extcap-interface",
            "ibwire-nothing",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "no ibwire capture target" in r.stderr and "Traceback" not in r.stderr


def test_ibdump_standin_full_disk_ends_with_one_sentence_and_a_valid_file(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        r, _ = _run(
            tmp_path,
            ["capture", "--pf", "mlx5_0", "-w", str(small / "x.pcap")],
            STANDIN_LIDS=",".join(f"{i}>{i + 1}" for i in range(1, 3000)),
        )  # ~200 kB of packets
        assert r.returncode == 1 and "No space left on device" in r.stderr and "Traceback" not in r.stderr, r.stderr
        tshark = subprocess.run(["tshark", "-r", str(small / "x.pcap")], capture_output=True, text=True)
        assert tshark.returncode == 0 and "cut short" not in tshark.stderr and len(tshark.stdout.splitlines()) > 500
        assert f"{len(tshark.stdout.splitlines()):,} complete packets kept" in r.stderr
        assert not list((tmp_path / "run").glob("capture-*.json"))
    finally:
        subprocess.run(["umount", str(small)])
