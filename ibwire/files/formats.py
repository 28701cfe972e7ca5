"""What marks a pcap or pcapng file (pcap(5); draft-ietf-opsawg-pcapng), and the longest record and block believed."""

import struct

PCAP_MAGICS = {  # magic -> (byte order, timestamp unit, record header length)
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6, 16),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6, 16),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9, 16),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9, 16),
    b"\x34\xcd\xb2\xa1": ("<", 1e-6, 24),
    b"\xa1\xb2\xcd\x34": (">", 1e-6, 24),  # Kuznetsov's modified pcap
}
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
# A length past these is damage, never an allocation (native/walk.h says the same).  tshark's limits:
# wiretap/wtap.h WTAP_MAX_PACKET_SIZE_STANDARD (captured bytes of a packet, every link type ibwire reads)
# and wiretap/pcapng.c MAX_BLOCK_SIZE (any pcapng block, 16 MiB in Wireshark 4.0).
MAX_PACKET = 262144
MAX_BLOCK = 16 << 20


def if_tsresol(opts: bytes, endian: str) -> tuple:
    """The if_tsresol option (code 9) among an Interface Description Block's options, as (numerator,
    denominator) of nanoseconds per tick, exact; microseconds when absent."""
    o = 0
    while o + 4 <= len(opts):
        code, ln = struct.unpack_from(endian + "HH", opts, o)
        if code == 0:
            break
        if code == 9 and ln >= 1:
            r = opts[o + 4]
            if r & 0x80:
                return (10**9, 2 ** (r & 0x7F))
            return (10**9, 10**r) if r <= 9 else (1, 10 ** (r - 9))
        o += 4 + ((ln + 3) & ~3)
    return (1000, 1)


# Bytes a type-specific ERF header adds after the 16-byte record header and its 8-byte extension headers
# (wiretap's pcap_get_phdr_size): Ethernet types pad 2, multi-channel and AAL2 types 4.
_ERF_TYPE_HEADER = [2 if t in (2, 11, 16, 20) else 4 if t in (5, 6, 7, 8, 9, 12, 17, 18) else 0 for t in range(128)]


def erf_header(data: bytes):
    """(record type, where the packet starts) of one ERF record, or None when its 16-byte header is cut
    short: extension headers of 8 bytes follow while bit 7 of the type byte before them is set."""
    if len(data) < 16:
        return None
    off, more = 16, data[8] & 0x80
    while more and off + 8 <= len(data):
        more, off = data[off] & 0x80, off + 8
    return data[8] & 0x7F, off


def erf_view_one(data: bytes) -> tuple:
    """erf_view of one whole record (its bytes), without numpy: (header length, nanosecond time)."""
    n = len(data)
    if n < 16:
        return 0, -1
    ts, rtype, hdr = int.from_bytes(data[:8], "little"), data[8], 16
    more = rtype & 0x80 and hdr + 8 <= n
    while more:
        more, hdr = data[hdr] & 0x80 and hdr + 16 <= n, hdr + 8
    frac = (ts & 0xFFFFFFFF) * 10**9
    frac = (frac + ((frac & 0x80000000) << 1)) >> 32
    return min(hdr + _ERF_TYPE_HEADER[rtype & 0x7F], n), (ts >> 32) * 10**9 + frac


def erf_view(buf, data, caplen):
    """How tshark sees ERF records (link type 197) at offsets `data` (caplen bytes each) of the byte array
    `buf`: (header lengths, nanosecond times).  Wireshark counts the ERF header as a pseudo-header, not as
    packet bytes (frame.len and frame.cap_len are the pcap lengths minus it), and takes the time from the
    ERF timestamp (seconds and a binary fraction, rounded to nanoseconds: wiretap/pcap-common.c).  A record
    too short for its header gets header length 0 and time -1 (keep the pcap record's)."""
    import numpy as np

    data = np.asarray(data, np.int64)
    caplen = np.asarray(caplen, np.int64)
    ok = caplen >= 16
    at = np.where(ok, data, 0)

    def byte(off):
        return buf[np.minimum(at + off, len(buf) - 1)].astype(np.uint64) if len(buf) else np.zeros(len(at), np.uint64)

    ts = np.zeros(len(at), np.uint64)
    for i in range(8):
        ts |= byte(i) << np.uint64(8 * i)
    rtype = byte(8).astype(np.int64)
    hdr = np.full(len(at), 16, np.int64)
    more = (rtype & 0x80) > 0
    more &= hdr + 8 <= caplen
    while more.any():  # extension headers: 8 bytes each, bit 7 of the first byte says another follows
        nxt = (byte(np.where(more, hdr, 0)).astype(np.int64) & 0x80) > 0
        hdr += np.where(more, 8, 0)
        more &= nxt & (hdr + 8 <= caplen)
    hdr += np.array(_ERF_TYPE_HEADER, np.int64)[rtype & 0x7F]
    hdr = np.where(ok, np.minimum(hdr, caplen), 0)
    frac = (ts & np.uint64(0xFFFFFFFF)) * np.uint64(10**9)
    frac = (frac + ((frac & np.uint64(0x80000000)) << np.uint64(1))) >> np.uint64(32)
    ns = (ts >> np.uint64(32)).astype(np.int64) * 10**9 + frac.astype(np.int64)
    return hdr, np.where(ok, ns, -1)
