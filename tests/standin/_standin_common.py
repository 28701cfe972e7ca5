"""Shared by the stand-in capture tools: they run where no ConnectX exists (named as stand-ins in tests).

They log their argv to $STANDIN_LOG, write a pcap to stdout with the frames a real tool would, wait for
SIGINT like ibdump/tcpdump, then print the tool's closing line to stderr.  $STANDIN_FAIL=<text> makes them
print that error and exit 1 instead.
"""
import json
import os
import signal
import struct
import sys
import time


def run(linktype: int, frames, closing: str):
    with open(os.environ["STANDIN_LOG"], "a") as f:
        f.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
    if os.environ.get("STANDIN_FAIL"):
        sys.stderr.write(os.environ["STANDIN_FAIL"] + "\n")
        sys.exit(1)
    stop = []
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    out = sys.stdout.buffer
    out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
    n = 0
    for data in frames:
        t = time.time()
        out.write(struct.pack("<IIII", int(t), int(t % 1 * 1e6), len(data), len(data)) + data)
        n += 1
    out.flush()
    while not stop:
        time.sleep(0.02)
    sys.stderr.write(closing.format(n=n) + "\n")
    sys.exit(0)
