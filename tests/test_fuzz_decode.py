"""Bad input never crashes: 100,000 mutated real packets through the decode path (truncation at every
offset, random bit flips, random bytes behind valid headers, every link type), none raising."""
import random

from ibwire.decode import decode_frame
from ibwire.readers import Frame, iter_frames
from tshark_oracle import PUBLIC

TOTAL = 100_000


def seeds():
    out = []
    for path in sorted(PUBLIC.glob("*.pcap")):
        frames = list(iter_frames(path))
        out += random.Random(path.name).sample(frames, min(12, len(frames)))
    return out


def mutations(rng, seed_frames):
    linktypes = [1, 197, 242, 247, 113, 276, 9999]
    while True:
        f = rng.choice(seed_frames)
        data = bytearray(f.data)
        kind = rng.randrange(5)
        if kind == 0:                                   # truncation at every offset
            for cut in range(len(data)):
                yield f.linktype, bytes(data[:cut])
            continue
        if kind == 1:                                   # random bit flips
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data) * 8)
                data[i // 8] ^= 0x80 >> (i % 8)
        elif kind == 2:                                 # random bytes behind valid headers
            keep = rng.randrange(min(len(data), 80))
            data = data[:keep] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(200)))
        elif kind == 3:                                 # the same bytes under another link type
            yield rng.choice(linktypes), bytes(data)
            continue
        else:                                           # header fields set to extremes
            for _ in range(4):
                i = rng.randrange(len(data))
                data[i] = rng.choice((0, 0xFF, 0x7F, 0x80))
        yield f.linktype, bytes(data)


def test_hundred_thousand_mutated_packets_never_raise():
    rng = random.Random(2026)
    seed_frames = seeds()
    n = 0
    statuses = set()
    for linktype, data in mutations(rng, seed_frames):
        d = decode_frame(Frame(n + 1, 0.0, len(data), len(data) + rng.choice((0, 0, 7)), linktype, data))
        assert isinstance(d.summary, str)
        statuses.add(d.flat.get("icrc.status"))
        n += 1
        if n >= TOTAL:
            break
    assert n == TOTAL
    # the damage was noticed, not silently decoded as good
    assert {"bad", "truncated"} <= statuses
