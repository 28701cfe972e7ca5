"""Benchmark: peak memory and wall time of decode, convert and audit on a 1,000,000-packet RoCEv2 capture
and on hostile files.

    .venv/bin/python bench/hostile.py [--packets 1000000]

The capture is bench/out/roce-<N>.pcap (bench/gen_roce.py, as bench/analysis.py makes it); the hostile
files go to bench/out/hostile/, built from captures/multitenant-clean.pcap: a pcapng whose last block claims
4 GiB (in a sparse file that long), the capture followed by 40 records of 64 MiB (2.7 GB, sparse), ERF
records whose rlen and wlen say 65535, and the capture cut inside its last packet.  Each command runs in
its own process; its peak resident memory is the kernel's VmHWM for that process.
"""

import argparse
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAPS = HERE.parent / "captures"
CLEAN = CAPS / "multitenant-clean"

# VmHWM is the peak of this process's own memory map (getrusage's ru_maxrss would carry the parent's over
# the exec); the exit status is the command's.
MEASURE = """
import sys
from ibwire.cli import main
sys.argv = ["ibwire", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else int(e.code is not None)
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("PEAK", int(hwm.split()[1]) // 1024, file=sys.stderr)
sys.exit(code)
"""


def measure(*args, preexec_fn=None, timeout=600) -> tuple:
    """(exit status, stdout, stderr without the peak line, peak MB or -1, wall seconds) of `ibwire ARGS`."""
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", MEASURE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
    wall = time.perf_counter() - t
    lines = r.stderr.splitlines()
    peak = int(lines[-1].split()[1]) if lines and lines[-1].startswith("PEAK ") else -1
    return r.returncode, r.stdout, "\n".join(lines[:-1] if peak >= 0 else lines), peak, wall


def records(raw: bytes) -> list:
    """(offset, length) of each record of a little-endian pcap."""
    off, out = 24, []
    while off + 16 <= len(raw):
        incl = struct.unpack_from("<I", raw, off + 8)[0]
        out.append((off, 16 + incl))
        off += 16 + incl
    return out


def pcapng_of(raw: bytes, recs: list, head: bool = True) -> bytes:
    """The pcap's records as a little-endian pcapng (one interface, ns timestamps: if_tsresol 9); without
    `head`, the packet blocks alone."""
    lt = struct.unpack_from("<I", raw, 20)[0]
    opts = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    idb = struct.pack("<IIHHI", 1, 20 + len(opts), lt, 0, 0) + opts + struct.pack("<I", 20 + len(opts))
    out = shb + idb if head else b""
    for off, n in recs:
        sec, frac, incl, orig = struct.unpack_from("<IIII", raw, off)
        ts = sec * 10**9 + frac
        data = raw[off + 16 : off + n]
        pad = -len(data) % 4
        blen = 32 + len(data) + pad
        out += (
            struct.pack("<IIIIIII", 6, blen, 0, ts >> 32, ts & 0xFFFFFFFF, incl, orig)
            + data
            + bytes(pad)
            + struct.pack("<I", blen)
        )
    return out


def block_4gib(path: Path, raw: bytes, recs: list) -> int:
    """The capture as pcapng, then an Enhanced Packet Block claiming 4 GiB in a file that long (sparse);
    the claimed length."""
    body, blen = pcapng_of(raw, recs), 0xFFFFFFF0
    with open(path, "wb") as f:
        f.write(body + struct.pack("<IIIIIII", 6, blen, 0, 0, 0, blen - 32, blen - 32))
        f.truncate(len(body) + blen - 4)
        f.seek(0, 2)
        f.write(struct.pack("<I", blen))
    return blen


def records_64mib(path: Path, raw: bytes, count: int = 40) -> None:
    """The capture followed by `count` records of 64 MiB each, their bytes holes of a sparse file."""
    with open(path, "wb") as f:
        f.write(raw)
        for i in range(count):
            f.write(struct.pack("<IIII", 1_700_000_100 + i, 0, 64 << 20, 64 << 20))
            f.seek(64 << 20, 1)
        f.truncate()


def erf_rlen(path: Path, raw: bytes, recs: list) -> None:
    """The capture (ERF records, link type 197) with every ERF header's rlen and wlen set to 65535."""
    bad = bytearray(raw)
    for off, _ in recs:
        struct.pack_into(">HHH", bad, off + 16 + 10, 0xFFFF, 0, 0xFFFF)
    path.write_bytes(bytes(bad))


def hostile(out: Path) -> dict:
    """Build the hostile files into `out`: {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    raw = (CAPS / "multitenant-clean.pcap").read_bytes()
    recs = records(raw)
    files = {
        k: out / name
        for k, name in (
            ("block-4gib", "block4g.pcapng"),
            ("records-64mib", "records64m.pcap"),
            ("erf-rlen", "erf-rlen.pcap"),
            ("cut-last", "cut.pcap"),
        )
    }
    block_4gib(files["block-4gib"], raw, recs)
    records_64mib(files["records-64mib"], raw)
    erf_rlen(files["erf-rlen"], raw, recs)
    files["cut-last"].write_bytes(raw[: recs[-1][0] + 36])
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_roce import generate

    big = HERE / "out" / f"roce-{args.packets}.pcap"
    if not big.exists():
        big.parent.mkdir(parents=True, exist_ok=True)
        generate(str(big), args.packets)
    conv = HERE / "out" / "converted.pcap"
    runs = [
        (big.name, "decode", ("decode", big, "-T", "fields", "-e", "bth.psn")),
        (big.name, "convert", ("convert", big, "-o", conv, "--link", "eth")),
        (big.name, "audit", ("audit", big, "--policy", CAPS / "roce-multitenant-clean.partitions.conf")),
    ]
    for name, path in hostile(HERE / "out" / "hostile").items():
        runs += [
            (name, "decode", ("decode", path)),
            (name, "convert", ("convert", path, "-o", conv, "--link", "ib")),
            (
                name,
                "audit",
                ("audit", path, "--policy", f"{CLEAN}.partitions.conf", "--tenants", f"{CLEAN}.tenants.toml"),
            ),
        ]
    print(f"{'input':<20} {'command':<8} {'exit':>4} {'wall s':>7} {'peak MB':>8}  last message")
    for name, command, argv in runs:
        status, out, err, peak, wall = measure(*argv)
        said = out.splitlines()[0] if command == "audit" and out else (err.strip().splitlines() or [""])[-1]
        said = said.replace(f"{argv[1]}: ", "")[:100]  # the verdict, or the last warning
        print(f"{name:<20} {command:<8} {status:>4} {wall:>7.2f} {peak:>8}  {said}")


if __name__ == "__main__":
    main()
