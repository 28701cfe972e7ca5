"""Rewrite captures between encapsulations where the packet survives the move.

* native IB (LINKTYPE_INFINIBAND 247, or ERF type 21 in LINKTYPE_ERF 197) ↔ each other: the IB bytes
  are the same, only the container changes (tshark 4.0 opens ERF but not 247);
* native IB with a GRH → Ethernet as RoCEv1 (ethertype 0x8915, GRH first): RoCEv1's ICRC masks the
  same fields as native IB with a GRH, so the ICRC stays valid; the LRH and VCRC are dropped;
* Ethernet frames stay as they are for `eth`.
Anything else (RoCEv2 to native IB, IB without GRH to Ethernet, IB link packets) is skipped and counted.
"""

import struct
from typing import Dict, Optional, Tuple

from dissectors.numbers import LINKTYPE_ERF, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND
from ibwire.errors import UserError
from ibwire.files import Frame, open_capture
from ibwire.files.formats import erf_header
from ibwire.files.outfile import output_file, refuse_aliasing
from ibwire.files.writers import ERF_TYPE_INFINIBAND, PcapngWriter, PcapWriter, erf_record

TARGETS = {"erf": LINKTYPE_ERF, "ib": LINKTYPE_INFINIBAND, "eth": LINKTYPE_ETHERNET}


def native_ib(frame: Frame) -> Tuple[Optional[bytes], str]:
    """The native IB packet a frame carries, or None and why not."""
    if frame.linktype == LINKTYPE_INFINIBAND:
        return frame.data, ""
    if frame.linktype == LINKTYPE_ERF:
        data, head = frame.data, erf_header(frame.data)
        if head is None:
            return None, "ERF header cut short"
        rtype, off = head
        if rtype != ERF_TYPE_INFINIBAND:
            return None, f"ERF record type {rtype} is not an InfiniBand packet"
        wlen = struct.unpack_from(">H", data, 14)[0]
        return data[off : off + wlen] if wlen else data[off:], ""
    return None, "not a native InfiniBand frame"


def roce1_from_ib(ib: bytes) -> Tuple[Optional[bytes], str]:
    if len(ib) < 8 or ib[1] & 3 != 3:
        return None, "native IB packets without a GRH have no addresses RoCE can carry"
    pktlen = (struct.unpack_from(">H", ib, 4)[0] & 0x7FF) * 4
    return b"\0" * 12 + b"\x89\x15" + ib[8:pktlen], ""


def convert(src: str, dst: str, link: str) -> Dict[str, int]:
    if link not in TARGETS:
        raise UserError(f"--link must be one of {', '.join(TARGETS)}, not {link!r}")
    target = TARGETS[link]
    refuse_aliasing([dst], [src])
    cap = open_capture(src)
    pcapng = dst.endswith(".pcapng")
    ifaces: Dict[int, int] = {}
    stats = {"written": 0, "skipped": 0}
    reasons: Dict[str, int] = {}
    with output_file(dst, inputs=[src]) as f:
        out = PcapngWriter(f) if pcapng else PcapWriter(f, target, nanos=True)
        for frame in cap:
            data, why = _convert_frame(frame, target)
            if data is None:
                stats["skipped"] += 1
                reasons[why] = reasons.get(why, 0) + 1
                continue
            if pcapng:
                if frame.iface not in ifaces:
                    ifaces[frame.iface] = out.add_interface(
                        target, name=f"{link}{len(ifaces)}", description=f"converted from {src} by ibwire"
                    )
                out.write(data, frame.time, iface=ifaces[frame.iface], flush=False)
            else:
                out.write(data, frame.time, flush=False)
            stats["written"] += 1
    stats["reasons"] = reasons
    stats["problems"] = cap.problems
    return stats


def _convert_frame(frame: Frame, target: int):
    if target == LINKTYPE_ETHERNET:
        if frame.linktype == LINKTYPE_ETHERNET:
            return frame.data, ""
        ib, why = native_ib(frame)
        return roce1_from_ib(ib) if ib is not None else (None, why)
    ib, why = native_ib(frame)
    if ib is None:
        return None, why
    if target == LINKTYPE_ERF:
        return erf_record(frame.time, ib, ERF_TYPE_INFINIBAND), ""
    return ib, ""
