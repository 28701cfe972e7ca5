"""`ibwire capture`: arm NIC-side sniffing for a port or VF, write a pcap, report completeness, disarm."""

from typing import Optional

import typer

from ibwire.capture.dumpcap import DEFAULT_BUFFER_MIB
from ibwire.cli.app import app


@app.command()
def capture(
    write: Optional[str] = typer.Option(
        None,
        "-w",
        "--write",
        help="Output file (.pcap, or .pcapng with "
        "nanosecond timestamps, interface statistics and a comment naming device, "
        "port, VF and backend); - writes pcap to standard output.",
    ),
    vf: Optional[int] = typer.Option(
        None, "--vf", help="Capture only VF N's traffic (resolved to MAC/VLAN/IPs or LIDs/GIDs)."
    ),
    pf: Optional[str] = typer.Option(None, "--pf", help="PF RDMA device or netdev (default: the only PF with VFs)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port number of the device (default 1)."),
    backend: str = typer.Option(
        "auto", "--backend", help="auto, ibdump, verbs, rdma-pcap, tc-mirror, netdev or ibsim."
    ),
    iface: Optional[str] = typer.Option(None, "-i", "--interface", help="Kernel interface for the netdev backend."),
    count: Optional[int] = typer.Option(None, "-c", "--count", help="Stop after COUNT packets."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop after S seconds."),
    rotate_mb: Optional[float] = typer.Option(None, "-C", "--file-size", help="Start a new file every MB megabytes."),
    rotate_files: Optional[int] = typer.Option(None, "-W", "--files", help="With -C, keep a ring of FILES files."),
    buffer_mib: int = typer.Option(
        DEFAULT_BUFFER_MIB,
        "-B",
        "--buffer-size",
        help="Kernel capture buffer in MiB (netdev, tc-mirror); the default holds a burst of 100,000 packets.",
    ),
    snaplen: Optional[int] = typer.Option(
        None, "-s", "--snapshot-length", help="Keep at most SNAPLEN bytes of each packet (netdev, tc-mirror)."
    ),
    bpf: Optional[str] = typer.Option(
        None,
        "-f",
        "--filter",
        help="Extra capture filter (pcap-filter syntax), "
        "compiled into the kernel with the VF selection (netdev, tc-mirror).",
    ),
    all_: bool = typer.Option(False, "--all", help="Keep every packet of the port, not only the VF's."),
    link: str = typer.Option(
        "erf",
        "--link",
        help="Native IB output: erf (ERF type 21, link type 197, tshark reads it) or ib (link type 247).",
    ),
    monitor: Optional[str] = typer.Option(
        None, "--monitor", help="tc-mirror: REP[:NETDEV] to mirror to and capture on (default: a temporary veth pair)."
    ),
    cleanup: bool = typer.Option(False, "--cleanup", help="Undo what killed captures left armed, then exit."),
):
    """Capture RDMA traffic of a port or SR-IOV VF from the PF host, and leave the NIC as it was."""
    from ibwire.capture import cleanup as undo
    from ibwire.capture import session

    if cleanup:
        undo.cleanup(print)  # a line per capture; exit status 1 when something stays armed
        return
    opts = session.Options(
        write=write,
        vf=vf,
        pf=pf,
        port=port,
        backend=backend,
        iface=iface,
        count=count,
        duration=duration,
        rotate_mb=rotate_mb,
        rotate_files=rotate_files,
        all=all_,
        link=link,
        monitor=monitor,
        buffer_mib=buffer_mib,
        snaplen=snaplen,
        bpf=bpf,
    )
    _check(opts)
    session.run(opts)


def _check(o) -> None:
    """Refuse option values and combinations no backend can honour, before anything is armed."""
    from ibwire.errors import UserError

    if o.backend not in ("auto", "ibdump", "verbs", "rdma-pcap", "tc-mirror", "netdev", "ibsim"):
        raise UserError(
            f"unknown backend {o.backend!r}; choose auto, ibdump, verbs, rdma-pcap, tc-mirror, netdev or ibsim"
        )
    if o.link not in ("erf", "ib"):
        raise UserError("--link is erf or ib")
    if not o.write:
        raise UserError("give the output file with -w FILE")
    if o.rotate_files and not o.rotate_mb:
        raise UserError("-W needs -C (the size at which to start a new file)")
    if o.write == "-" and o.rotate_mb:
        raise UserError("-C rotates files; it cannot apply to standard output (-w -)")
    if o.buffer_mib < 1 or (o.snaplen is not None and o.snaplen < 1) or (o.count is not None and o.count < 1):
        raise UserError("-B, -s and -c take positive numbers")
