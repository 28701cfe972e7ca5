"""A .pcap capture keeps the kernel's nanoseconds: dumpcap's own pcapng (real dumpcap on lo, real kernel
timestamps) rewritten by ibwire.files.nspcap must read in tshark exactly as the pcapng does, time to the
nanosecond, and a stream cut inside a block leaves a valid file of the complete records."""

import os
import socket
import subprocess

from ibwire.files.nspcap import NsPcapRewriter

FIELDS = ["-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len", "-e", "frame.cap_len", "-e", "udp.payload"]


def _tshark(path):
    r = subprocess.run(["tshark", "-r", str(path)] + FIELDS, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def _rewrite(src, dst, **rotate) -> NsPcapRewriter:
    with open(src, "rb") as stream:
        w = NsPcapRewriter(stream, str(dst), **rotate)
        w.join()
    assert w.error is None
    return w


def test_pcap_output_has_the_nanoseconds_of_dumpcaps_pcapng(tmp_path):
    ng = tmp_path / "lo.pcapng"
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    dc = subprocess.Popen(
        ["dumpcap", "-i", "lo", "-n", "-f", f"udp port {port}", "-s", "100", "-c", "20", "-w", str(ng)],
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in dc.stderr:  # dumpcap listens
        if line.startswith("File: "):
            break
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(20):
        tx.sendto(bytes([i]) * (50 + 10 * i), ("127.0.0.1", port))  # 200 bytes and more are cut at -s 100
    dc.communicate(timeout=60)
    pcap = tmp_path / "lo.pcap"
    w = _rewrite(ng, pcap)
    assert w.packets == 20 and w.files == [str(pcap)]
    assert pcap.read_bytes()[:4] == (0xA1B23C4D).to_bytes(4, "little")
    want = _tshark(ng)
    assert len(want) == 20 and len({line.split("\t")[0][-3:] for line in want}) > 1  # ns digits, not zeros
    assert _tshark(pcap) == want

    data = ng.read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[: len(data) - 7 - 108])  # dumpcap's closing statistics gone, the last packet cut
    w = _rewrite(cut, tmp_path / "cut.pcap")
    whole = pcap.read_bytes()
    assert w.packets == 19 and (tmp_path / "cut.pcap").read_bytes() == whole[: len(whole) - 16 - 100]  # 19 records

    ring = _rewrite(ng, tmp_path / "ring.pcap", rotate_mb=0.0005, rotate_files=100)  # -C: files of ~500 bytes
    assert ring.packets == 20 and len(ring.files) > 3
    for f in ring.files:  # each file within the size, or a single record larger than it
        assert os.path.getsize(f) <= 500 or len(_tshark(f)) == 1
    assert [line for f in ring.files for line in _tshark(f)] == want  # every packet, in order, once
