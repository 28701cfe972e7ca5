"""Which backends can run here, and which one `--backend auto` picks for a target (with the reason).

Rules (capture-mechanisms.md §4): IB port -> ibdump, else the verbs sniffer; Ethernet VF -> tc-mirror in
switchdev mode, else the PF sniffer with a warning that VF traffic is likely invisible in legacy SR-IOV.
"""

from typing import List, Optional, Tuple

from ibwire.capture import hostcmds
from ibwire.capture.target import Target
from ibwire.errors import UserError

BACKENDS = ["ibdump", "verbs", "rdma-pcap", "tc-mirror", "netdev", "ibsim"]


def _pyverbs_available() -> bool:
    try:
        from ibwire.capture.backends.verbs import import_pyverbs

        import_pyverbs()
        return True
    except UserError:
        return False


def why_not(backend: str, link_layer: Optional[str], eswitch: Optional[str], has_rdma: bool) -> Optional[str]:
    """None if the backend can run for a port of this link layer, else the reason it cannot."""
    cap = hostcmds.has_cap_net_raw()
    ib = (link_layer or "").lower() == "infiniband"
    if backend == "ibdump":
        if not hostcmds.which("ibdump"):
            return "ibdump is not installed (MFT, DOCA-host or mstflint provide it)"
        if link_layer and not ib:
            return "ibdump captures InfiniBand ports; this port is Ethernet"
        return None if has_rdma else "no RDMA device"
    if backend == "verbs":
        if not has_rdma:
            return "no RDMA support in this kernel"
        if not _pyverbs_available():
            return "pyverbs is not installed (python3-pyverbs)"
        return None if cap else "missing CAP_NET_RAW"
    if backend == "rdma-pcap":
        if not hostcmds.which("tcpdump"):
            return "tcpdump is not installed"
        if not has_rdma:
            return "no RDMA support in this kernel"
        return None if cap else "missing CAP_NET_RAW"
    if backend in ("tc-mirror", "netdev") and not hostcmds.which("dumpcap"):
        return "dumpcap, the capture engine, is not installed (wireshark-common, installed with tshark)"
    if backend == "tc-mirror":
        if not hostcmds.which("tc"):
            return "tc (iproute2) is not installed"
        if ib:
            return "InfiniBand ports have no eswitch; tc-mirror is for Ethernet (RoCE) in switchdev mode"
        if eswitch and eswitch != "switchdev":
            return (
                f"the eswitch is in {eswitch} mode; switchdev is needed (devlink dev eswitch set pci/<BDF> "
                f"mode switchdev, with the VFs unbound first)"
            )
        return None if cap else "missing CAP_NET_RAW"
    if backend == "netdev":
        return None if cap else "missing CAP_NET_RAW"
    if backend == "ibsim":
        return None if hostcmds.which("ibsim") else "ibsim is not installed (ibsim-utils)"
    return "unknown backend"


def choose(t: Target, forced: str) -> Tuple[str, str, List[str]]:
    """(backend, reason, warnings) for a target."""
    warnings = []
    has_rdma = t.device is not None
    if forced != "auto":
        if forced in ("tc-mirror",) and t.lab:
            return forced, "forced with --backend; the lab's representors are veth ends", warnings
        if forced not in ("ibsim", "netdev"):
            why = why_not(forced, t.link_layer if t.device else None, t.eswitch, has_rdma or bool(t.lab))
            if why:
                raise UserError(f"backend {forced} cannot run here: {why}")
        if t.vf is not None and forced in ("verbs", "rdma-pcap") and not t.is_ib and t.eswitch != "switchdev":
            warnings.append(vf_invisible_warning(t))
        return forced, "forced with --backend", warnings
    if t.lab:
        return (
            "tc-mirror" if t.vf is not None else "netdev",
            "the ibwire lab is a switchdev-like eswitch of veth pairs",
            warnings,
        )
    if t.device is None:
        return "netdev", f"{t.iface} is a kernel interface", warnings
    if t.iface and t.vf is None:
        return "netdev", "-i names a kernel interface", warnings
    if t.is_ib:
        why = why_not("ibdump", t.link_layer, None, True)
        if why is None:
            return (
                "ibdump",
                "InfiniBand port: ibdump attaches the firmware port sniffer, which sees VF traffic crossing the port",
                warnings,
            )
        for b in ("verbs", "rdma-pcap"):
            if why_not(b, t.link_layer, None, True) is None:
                warnings.append(
                    f"ibdump cannot run ({why}); the verbs sniffer on an IB port is a probe that the device may refuse"
                )
                return b, "InfiniBand port without ibdump", warnings
        raise UserError(
            f"nothing can capture {t.description}: ibdump: {why}; verbs: {why_not('verbs', t.link_layer, None, True)}"
        )
    if t.vf is not None:
        why = why_not("tc-mirror", t.link_layer, t.eswitch, True)
        if why is None and t.representor:
            return "tc-mirror", f"Ethernet VF in switchdev mode: mirror representor {t.representor}", warnings
        warnings.append(vf_invisible_warning(t))
    for b in ("verbs", "rdma-pcap"):
        if why_not(b, t.link_layer, t.eswitch, True) is None:
            return b, "RoCE port: the PF's verbs sniffer flow", warnings
    raise UserError(
        f"nothing can capture {t.description}: verbs: {why_not('verbs', t.link_layer, None, True)}; "
        f"rdma-pcap: {why_not('rdma-pcap', t.link_layer, None, True)}"
    )


def vf_invisible_warning(t: Target) -> str:
    return (
        f"warning: the PF sniffer most likely cannot see VF {t.vf}'s RoCE traffic while the eswitch is in "
        f"{t.eswitch or 'legacy'} mode (VF traffic bypasses the PF's flow tables); to see it, put the eswitch "
        f"in switchdev mode (`devlink dev eswitch set pci/{t.pci} mode switchdev` with the VFs unbound) and "
        f"use --backend tc-mirror, or capture on a switch SPAN port"
    )
