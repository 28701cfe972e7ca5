"""What marks a pcap or pcapng file (pcap(5); draft-ietf-opsawg-pcapng), and the longest record and block believed."""
import struct

PCAP_MAGICS = {   # magic -> (byte order, timestamp unit, record header length)
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6, 16), b"\xa1\xb2\xc3\xd4": (">", 1e-6, 16),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9, 16), b"\xa1\xb2\x3c\x4d": (">", 1e-9, 16),
    b"\x34\xcd\xb2\xa1": ("<", 1e-6, 24), b"\xa1\xb2\xcd\x34": (">", 1e-6, 24),   # Kuznetsov's modified pcap
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
                return (10 ** 9, 2 ** (r & 0x7F))
            return (10 ** 9, 10 ** r) if r <= 9 else (1, 10 ** (r - 9))
        o += 4 + ((ln + 3) & ~3)
    return (1000, 1)
