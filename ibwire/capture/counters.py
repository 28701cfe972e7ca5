"""Counters to compare a capture against: what the port or VF really sent and received meanwhile.

Sources: representor/netdev stats64 from `ip -s -j link` (a switchdev representor reports its VF's vport),
sysfs IB port counters (port_xmit_packets/port_rcv_packets), `ethtool -S` *_packets_phy on a PF.
"""

from typing import Callable, Optional, Tuple

from ibwire.capture import hostcmds, sysfs
from ibwire.capture.target import Target


def source(t: Target, backend: str) -> Optional[Tuple[str, Callable[[], dict]]]:
    """(description, snapshot function returning {'packets', 'bytes'}) or None when nothing fits."""

    def link(dev):
        def snap():
            s = hostcmds.link_stats(dev)
            return {"packets": s["rx_packets"] + s["tx_packets"], "bytes": s["rx_bytes"] + s["tx_bytes"]} if s else {}

        return snap

    if backend == "tc-mirror" and t.representor:
        return f"VF {t.vf} counters (representor {t.representor})", link(t.representor)
    if backend == "netdev" and t.iface:
        return f"{t.iface} counters", link(t.iface)
    if t.sysfs_port is not None:
        port = t.sysfs_port
        if sysfs.port_counters(port):
            scope = f"{t.device} port {t.port} counters" + (" (whole port, all functions)" if t.vf is not None else "")
            return scope, lambda: sysfs.port_counters(port)
        if t.uplink:
            dev = t.uplink

            def eth():
                s = hostcmds.ethtool_stats(dev)
                if "rx_packets_phy" in s:
                    return {
                        "packets": s["rx_packets_phy"] + s.get("tx_packets_phy", 0),
                        "bytes": s.get("rx_bytes_phy", 0) + s.get("tx_bytes_phy", 0),
                    }
                return {}

            return f"{dev} physical port counters (ethtool -S)", eth
    return None


def compare(captured: int, captured_bytes: Optional[int], before: dict, after: dict, what: str, drops: int) -> str:
    """One line: captured against the counters' movement (bytes too when known), and the drops."""
    lines = []
    if before and after:
        m = after["packets"] - before["packets"]
        mb = after["bytes"] - before["bytes"]
        if m == 0:
            lines.append(
                f"captured {captured:,} packets, but the {what} did not move (they may not count this traffic)"
            )
        elif captured >= m:
            lines.append(
                f"captured {captured:,} of {m:,} packets"
                + (f" ({captured_bytes:,} of {mb:,} bytes)" if captured_bytes is not None else "")
                + f" by the {what}"
            )
        else:
            lines.append(
                f"captured {captured:,} of {m:,} packets by the {what}: {m - captured:,} missing "
                f"({100 * (m - captured) / m:.1f}%)"
            )
    else:
        lines.append(
            f"captured {captured:,} packets"
            + (f" ({captured_bytes:,} bytes)" if captured_bytes is not None else "")
            + "; no counters to compare with"
        )
    lines.append(f"backend drops: {drops:,}")
    return "; ".join(lines)
