"""`ibwire lab up|down|status|traffic`: a switchdev-like PF host with four VFs and a remote host in netns;
with `up --rdma`, tenant guests running the kernel's Soft-RoCE (`run`, `faults`, `counters` act on them)."""

import json
from typing import List, Optional

import typer

from ibwire.cli.app import Typer, app

lab_app = Typer(
    help="Network-namespace lab: PF host, VF representors, four VFs and a remote host; with "
    "`up --rdma`, tenant guests running the kernel's Soft-RoCE.",
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")


@lab_app.command("up")
def lab_up(
    prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces."),
    vlan: Optional[List[str]] = typer.Option(
        None,
        help="Namespace lab: the 802.1Q VLAN of every host. "
        "--rdma: TENANT=VID, repeated, one per guest in order (the list "
        "repeats when shorter).",
    ),
    rdma: bool = typer.Option(
        False,
        "--rdma",
        help="Boot tenant guests running rdma_rxe instead of namespaces (QEMU, the host's kernel and root, read-only).",
    ),
    guests: int = typer.Option(3, "--guests", help="--rdma: number of guests."),
    memory: int = typer.Option(512, "--memory", help="--rdma: MiB of memory per guest (at most 1024)."),
    accel: str = typer.Option(
        "auto", "--accel", help="--rdma: auto, tcg or kvm (auto: KVM only where it runs a stock kernel)."
    ),
    timeout: float = typer.Option(300, "--timeout", help="--rdma: seconds to wait for the guests."),
):
    """Build the lab (needs root)."""
    from ibwire.errors import UserError

    if rdma:
        from ibwire.lab.rdma import lab as rlab

        if not 1 <= guests <= 16:
            raise UserError("--guests is 1..16")
        if accel not in ("auto", "tcg", "kvm"):
            raise UserError("--accel is auto, tcg or kvm")
        lab = rlab.up(prefix, rlab.parse_tenants(vlan or [], guests), memory, accel, timeout)
        for name, secs in lab["boot_seconds"].items():
            print(f"{name} ready in {secs:.1f} s")
        print(rlab.status(prefix))
        return
    from ibwire.lab import topology

    if vlan and (len(vlan) > 1 or not vlan[0].isdigit()):
        raise UserError("the namespace lab takes one --vlan VID (TENANT=VID is for --rdma)")
    topology.up(prefix, int(vlan[0]) if vlan else None)
    print(topology.status(prefix))


@lab_app.command("down")
def lab_down(
    prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces."),
    force: bool = typer.Option(False, "--force", help="Stop captures running inside the lab first."),
):
    """Remove the lab: guests, namespaces, taps, bridges and the lab's files (refused while a capture runs
    inside the lab, unless --force)."""
    from ibwire.lab import topology
    from ibwire.lab.rdma import lab as rlab

    topology.stop_captures(prefix, force)
    gone = rlab.down(prefix) + topology.down(prefix)
    print(f"removed {', '.join(gone)}" if gone else f"lab {prefix} was not up")


@lab_app.command("status")
def lab_status(prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces.")):
    """Show the lab's hosts, MACs, IPs and representors."""
    from ibwire.lab import topology
    from ibwire.lab.rdma import lab as rlab

    print(rlab.status(prefix) if rlab.is_rdma(prefix) else topology.status(prefix))


@lab_app.command("run")
def lab_run(
    guest: str = typer.Argument(..., help="Guest name (g0) or index."),
    command: List[str] = typer.Argument(..., help="The command and its arguments (after --)."),
    prefix: str = typer.Option("ibwlab", help="Name prefix of the lab."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Stop the command after S seconds."),
):
    """Run a command in an RDMA lab guest; its output streams here and its exit status is ibwire's."""
    from ibwire.lab.rdma import control

    rc = control.run(prefix, guest, command, timeout)
    if rc:
        raise SystemExit(rc)


@lab_app.command("faults")
def lab_faults(
    guest: str = typer.Argument(..., help="Guest name (g0) or index."),
    loss: Optional[str] = typer.Option(None, "--loss", help="Drop this share of sent frames (2%)."),
    delay: Optional[str] = typer.Option(None, "--delay", help="Delay sent frames (5ms, or '5ms 1ms')."),
    duplicate: Optional[str] = typer.Option(None, "--duplicate", help="Duplicate this share (1%)."),
    reorder: Optional[str] = typer.Option(None, "--reorder", help="Send this share without the delay (needs --delay)."),
    clear: bool = typer.Option(False, "--clear", help="Remove the faults."),
    prefix: str = typer.Option("ibwlab", help="Name prefix of the lab."),
):
    """Impair what a guest sends (tc netem on its NIC, all VLANs), or --clear it; prints the qdisc and its counts."""
    from ibwire.errors import UserError
    from ibwire.lab.rdma import control

    if not (clear or loss or delay or duplicate or reorder):
        raise UserError("give --loss, --delay, --duplicate, --reorder or --clear")
    print(control.faults(prefix, guest, loss, delay.split() if delay else None, duplicate, reorder, clear), end="")


@lab_app.command("counters")
def lab_counters(
    guest: Optional[str] = typer.Argument(None, help="Guest name (g0) or index; all when omitted."),
    prefix: str = typer.Option("ibwlab", help="Name prefix of the lab."),
):
    """Print the guest's rxe hw_counters (out_of_seq_request, duplicate_request, rcvd_seq_err ...) as JSON."""
    from ibwire.lab.rdma import control
    from ibwire.lab.rdma import lab as rlab

    if guest is not None:
        print(json.dumps(control.counters(prefix, guest), indent=1))
        return
    print(json.dumps({v["name"]: control.counters(prefix, v["name"]) for v in rlab.load(prefix)["vfs"]}, indent=1))


@lab_app.command("traffic")
def lab_traffic(
    scenario: str = typer.Argument(..., help="A RoCEv2 capture file or an `ibwire synth` scenario."),
    prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces."),
    pairs: Optional[str] = typer.Option(
        None, help="Host pairs for a two-endpoint capture, e.g. vf0-remote,vf2-vf1 (endpoint A plays the first)."
    ),
    map_: Optional[str] = typer.Option(None, "--map", help="Explicit CAPTURE_IP=HOST,... mapping."),
):
    """Replay a scenario's RoCEv2 packets between lab hosts with their MACs and IPs."""
    from ibwire.errors import UserError
    from ibwire.lab import topology, traffic

    mapping = None
    if map_:
        try:
            mapping = dict(kv.split("=", 1) for kv in map_.split(","))
        except ValueError:
            raise UserError("--map takes CAPTURE_IP=HOST pairs separated by commas") from None
    sent = traffic.replay(topology.load(prefix), scenario, pairs, mapping)
    print(", ".join(f"{h}: {n} frames" for h, n in sent.items()))


@lab_app.command("samples")
def lab_samples(
    outdir: str = typer.Argument(..., help="Directory for rxe-NAME.pcap and rxe-NAME.counters.json."),
    only: Optional[str] = typer.Option(None, "--only", help="Comma-separated sample names."),
    prefix: str = typer.Option("ibwlab", help="Name prefix of the lab."),
):
    """Record the RDMA lab's sample captures (RC WRITE/READ/SEND, UC, UD, atomics, RDMA-CM, RC under 2% loss)
    between guests g0 and g1, each with both guests' rxe counter differences beside it."""
    from ibwire.lab.rdma import samples

    samples.record(prefix, outdir, only.split(",") if only else None)
