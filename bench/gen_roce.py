"""A fast, deterministic RoCEv2 capture for benchmarks: RC WRITE/READ/SEND traffic with ACKs and CNPs.

Headers are packed with struct from per-connection templates; every packet carries a correct ICRC
(dissectors.crc.icrc_roce2) so the benchmark pays for real CRC checks.  Mix per round on each of the
16 connections: a 4 KiB RDMA WRITE (First/Middle×2/Last, MTU 1024) + ACK, a 4 KiB READ (request +
4 responses), a 256-byte SEND Only + ACK, and every 64th round an ECN-marked packet followed by a CNP.
"""

import struct
import sys

from dissectors.crc import icrc_roce2
from dissectors.numbers import LINKTYPE_ETHERNET

MTU = 1024
QPS = 16


def _ip_csum(hdr: bytes) -> int:
    s = sum(struct.unpack("!10H", hdr))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


class Conn:
    def __init__(self, i: int):
        self.macs = (bytes([2, 0, 0, 0, 0, 1 + i % 4]), bytes([2, 0, 0, 0, 1, 1 + i % 4]))
        self.ips = (bytes([10, 0, 0, 1 + i % 4]), bytes([10, 0, 1, 1 + i % 4]))
        self.qpn = (0x100 + i, 0x200 + i)
        self.psn = [i * 1000, i * 7000]
        self.sport = 49152 + i

    def packet(
        self, side: int, opcode: int, psn: int, ext: bytes, payload: bytes, ack_req=False, ecn=2, becn=False
    ) -> bytes:
        dst = 1 - side
        pad = -len(payload) % 4
        bth = struct.pack(
            "!BBHBBHBBH",
            opcode,
            (pad << 4),
            0xFFFF,
            0x40 if becn else 0,
            self.qpn[dst] >> 16,
            self.qpn[dst] & 0xFFFF,
            0x80 if ack_req else 0,
            (psn >> 16) & 0xFF,
            psn & 0xFFFF,
        )
        l4 = bth + ext + payload + b"\0" * pad
        ulen = 8 + len(l4) + 4
        ip = bytearray(
            struct.pack("!BBHHHBBH4s4s", 0x45, ecn, 20 + ulen, 0, 0x4000, 64, 17, 0, self.ips[side], self.ips[dst])
        )
        ip[10:12] = struct.pack("!H", _ip_csum(bytes(ip)))
        pkt = bytes(ip) + struct.pack("!HHHH", self.sport, 4791, ulen, 0) + l4
        return self.macs[dst] + self.macs[side] + b"\x08\x00" + pkt + struct.pack("<I", icrc_roce2(pkt))


def generate(path: str, count: int, t0: float = 1_700_000_000.0) -> int:
    """Write `count` packets to a little-endian microsecond pcap; returns the number written."""
    conns = [Conn(i) for i in range(QPS)]
    data = bytes(range(256)) * (MTU // 256)
    n, t = 0, t0
    with open(path, "wb", buffering=1 << 22) as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
        rnd = 0

        def emit(p):
            nonlocal n, t
            t += 1e-6
            sec = int(t)
            f.write(struct.pack("<IIII", sec, int((t - sec) * 1e6), len(p), len(p)) + p)
            n += 1
            return n >= count

        while True:
            for c in conns:
                psn = c.psn[0]
                reth = struct.pack("!QII", 0x7F0000000000 + psn * 4096, 0x1234, 4 * MTU)
                for k, op in enumerate((0x06, 0x07, 0x07, 0x08)):
                    if emit(c.packet(0, op, (psn + k) & 0xFFFFFF, reth if k == 0 else b"", data, ack_req=k == 3)):
                        return n
                if emit(c.packet(1, 0x11, (psn + 3) & 0xFFFFFF, struct.pack("!I", (psn + 3) & 0xFFFFFF), b"")):
                    return n
                psn += 4
                rreq = struct.pack("!QII", 0x7E0000000000 + psn * 4096, 0x5678, 4 * MTU)
                if emit(c.packet(0, 0x0C, psn, rreq, b"", ack_req=True)):
                    return n
                for k, op in enumerate((0x0D, 0x0E, 0x0E, 0x0F)):
                    aeth = struct.pack("!I", (psn + k) & 0xFFFFFF) if op in (0x0D, 0x0F) else b""
                    if emit(c.packet(1, op, (psn + k) & 0xFFFFFF, aeth, data)):
                        return n
                psn += 4
                if emit(c.packet(0, 0x04, psn, b"", data[:256], ack_req=True, ecn=3 if rnd % 64 == 0 else 2)):
                    return n
                if emit(c.packet(1, 0x11, psn, struct.pack("!I", psn & 0xFFFFFF), b"")):
                    return n
                if rnd % 64 == 0 and emit(c.packet(1, 0x81, 0, b"\0" * 16, b"", becn=True)):
                    return n
                c.psn[0] = (psn + 1) & 0xFFFFFF
            rnd += 1


if __name__ == "__main__":
    print(generate(sys.argv[1], int(sys.argv[2])))
