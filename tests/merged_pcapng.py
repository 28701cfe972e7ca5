"""Several captures gathered into one pcapng, one interface per capture (named after it), so tshark starts once
for all of them: the filter tests' input."""

from pathlib import Path

from ibwire.files import iter_frames
from ibwire.files.writers import PcapngWriter


def merge(path: Path, captures: list) -> Path:
    w = PcapngWriter(str(path))
    for cap in captures:
        frames = list(iter_frames(str(cap)))
        i = w.add_interface(frames[0].linktype, cap.name)
        for f in frames:
            w.write(f.data, f.time, i, f.wirelen, flush=False)
    w.close()
    return path
