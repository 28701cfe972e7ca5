"""`ibwire capture`: arm NIC-side sniffing for a port or VF, write a pcap, report completeness, disarm."""
from typing import Optional

import typer

from .app import app


@app.command()
def capture(
    write: Optional[str] = typer.Option(None, "-w", "--write", help="Output file (.pcap, or .pcapng with an "
                                        "interface description naming device, port, VF and backend)."),
    vf: Optional[int] = typer.Option(None, "--vf", help="Capture only VF N's traffic (resolved to MAC/VLAN/IPs "
                                     "or LIDs/GIDs)."),
    pf: Optional[str] = typer.Option(None, "--pf", help="PF RDMA device or netdev (default: the only PF with VFs)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port number of the device (default 1)."),
    backend: str = typer.Option("auto", "--backend", help="auto, ibdump, verbs, rdma-pcap, tc-mirror, netdev or "
                                "ibsim."),
    iface: Optional[str] = typer.Option(None, "-i", "--interface", help="Kernel interface for the netdev backend."),
    count: Optional[int] = typer.Option(None, "-c", "--count", help="Stop after COUNT packets."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Stop after S seconds."),
    rotate_mb: Optional[float] = typer.Option(None, "-C", help="Start a new file every MB megabytes."),
    rotate_files: Optional[int] = typer.Option(None, "-W", help="With -C, keep a ring of FILES files."),
    all_: bool = typer.Option(False, "--all", help="Keep every packet of the port, not only the VF's."),
    link: str = typer.Option("erf", "--link", help="Native IB output: erf (ERF type 21, link type 197, tshark "
                             "reads it) or ib (link type 247)."),
    monitor: Optional[str] = typer.Option(None, "--monitor", help="tc-mirror: REP[:NETDEV] to mirror to and "
                                          "capture on (default: a temporary veth pair)."),
    cleanup: bool = typer.Option(False, "--cleanup", help="Undo what killed captures left armed, then exit."),
):
    """Capture RDMA traffic of a port or SR-IOV VF from the PF host, and leave the NIC as it was."""
    from ..errors import UserError
    from ..capture import journal, session
    if cleanup:
        lines = journal.cleanup()
        for line in lines or ["nothing to clean up"]:
            print(line)
        return
    if backend not in ("auto", "ibdump", "verbs", "rdma-pcap", "tc-mirror", "netdev", "ibsim"):
        raise UserError(f"unknown backend {backend!r}; choose auto, ibdump, verbs, rdma-pcap, tc-mirror, netdev "
                        f"or ibsim")
    if link not in ("erf", "ib"):
        raise UserError("--link is erf or ib")
    if not write:
        raise UserError("give the output file with -w FILE")
    if rotate_files and not rotate_mb:
        raise UserError("-W needs -C (the size at which to start a new file)")
    session.run(session.Options(write=write, vf=vf, pf=pf, port=port, backend=backend, iface=iface, count=count,
                                duration=duration, rotate_mb=rotate_mb, rotate_files=rotate_files, all=all_,
                                link=link, monitor=monitor))
