"""The evidence frames of an audit: read back from its captures, decoded, and written as a pcapng file
whose packet comments (pcapng opt_comment, Wireshark's `frame.comment`) name each finding the frame
supports: `ibwire finding N: RULE SEVERITY: description`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ibwire.audit.wsfilter import evidence_comment
from ibwire.files import Frame, open_capture


@dataclass
class Evidence:
    frame: Frame
    path: str  # the capture it comes from
    local: int  # its number in that capture (audit numbers run on across files)
    decoded: object = None  # ibwire.decode.Decoded


def collect(paths: list, numbers: set, decode: bool = True) -> dict:
    """Audit frame number -> Evidence for `numbers`, reading each capture once: through the compiled walk
    (only the wanted frames are copied and decoded), or frame by frame when the walk finds the file
    damaged (the reader that resynchronises numbers frames as the audit did)."""
    import numpy as np

    from ibwire.decode import decode_frame
    from ibwire.decode.stream import Stream

    out: dict = {}
    offset = 0
    for path in paths:
        if len(out) == len(numbers):
            break
        found, last, stream = {}, 0, Stream(str(path), icrc=False)
        wanted = np.array(sorted(n - offset for n in numbers if n > offset), np.int64)
        for batch in stream:
            frames = batch.rec["frame"]
            if stream.problems:
                break
            if len(frames):
                last = int(frames[-1])
            for i in np.flatnonzero(np.isin(frames, wanted)).tolist():
                frame = batch.frame(i)
                found[offset + frame.number] = Evidence(
                    frame, str(path), frame.number, decode_frame(frame) if decode else None
                )
        if stream.problems:
            found, last = {}, 0
            for frame in open_capture(str(path)):
                last = frame.number
                if offset + frame.number in numbers:
                    found[offset + frame.number] = Evidence(
                        frame, str(path), frame.number, decode_frame(frame) if decode else None
                    )
        out.update(found)
        offset += last
    return out


def write_pcapng(out, findings: list, evidence: dict, inputs: list) -> int:
    """Write every evidence frame once, in capture order, with one comment per finding citing it."""
    from ibwire.files.outfile import output_file
    from ibwire.files.writers import PcapngWriter

    notes: dict = {}
    for f in findings:
        for n in f.frames:
            notes.setdefault(n, []).append(evidence_comment(f.number, f))
    with output_file(str(out), "wb", inputs=inputs) as fh:
        w = PcapngWriter(fh)
        ifaces: dict = {}
        for n in sorted(notes):
            ev: Optional[Evidence] = evidence.get(n)
            if ev is None:
                continue
            key = (ev.path, ev.frame.linktype)
            if key not in ifaces:
                ifaces[key] = w.add_interface(ev.frame.linktype, os.path.basename(ev.path), f"evidence from {ev.path}")
            comments = [f"{c} (audit frame {n}, frame {ev.local} of {os.path.basename(ev.path)})" for c in notes[n]]
            w.write(
                ev.frame.data,
                ts=ev.frame.time,
                iface=ifaces[key],
                wirelen=ev.frame.wirelen,
                flush=False,
                comments=tuple(comments),
            )
        fh.flush()
        return w.count
