"""Runs inside a lab namespace: send a pcap's frames on an interface (AF_PACKET), or with `--sink N` hold UDP
port 4791 open until N datagrams arrived (or 60 s passed: a loaded machine starts the senders slowly) and print how many did, so replayed RoCEv2 packets
are never answered with ICMP port unreachable."""

import socket
import sys

from dissectors.numbers import ROCE_V2_PORT
from ibwire.files import iter_frames

SINK_TIMEOUT = 60.0


def main(argv):
    if argv[0] == "--sink":
        want = int(argv[1])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.bind(("0.0.0.0", ROCE_V2_PORT))
        s.settimeout(SINK_TIMEOUT)
        print("ready", flush=True)
        got = 0
        try:
            while got < want:
                s.recv(65536)
                got += 1
        except socket.timeout:
            pass
        print(got, flush=True)
        return 0
    iface, path = argv
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((iface, 0))
    n = 0
    for fr in iter_frames(path):
        s.send(fr.data)
        n += 1
    print(n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
