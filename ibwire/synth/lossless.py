"""Lossless-Ethernet control frames of a scenario: the PFC/PAUSE frames ([[pfc]]) and LLDP DCBX frames
([[lldp]]) ports send, built by dissectors.dcbfacts (untagged, as MAC control and LLDP frames travel)."""

from typing import List, Tuple

from dissectors.dcbfacts import lldp_frame, pause_frame, pfc_frame
from ibwire.synth.engine import Context


def control_frames(ctx: Context, t0: float) -> List[Tuple[float, bytes]]:
    """(time, frame) of every pause and LLDP frame: `count` XOFFs `interval` apart, then an XON if asked."""
    s, out = ctx.s, []
    for p in s.pfc:
        mac = s.ports[p["port"]].mac
        for k in range(p["count"]):
            t = t0 + p["at"] + k * p["interval"]
            out.append(
                (t, pause_frame(mac, p["quanta"]) if p["pause"] else pfc_frame(mac, {p["priority"]: p["quanta"]}))
            )
        if p["xon"]:
            t = t0 + p["at"] + p["count"] * p["interval"]
            out.append((t, pause_frame(mac, 0) if p["pause"] else pfc_frame(mac, {p["priority"]: 0})))
    for e in s.lldp:
        port = s.ports[e["port"]]
        out.append((t0 + e["at"], lldp_frame(port.mac, e["port"], e["pfc"], e["apps"], e["willing"])))
    return out
