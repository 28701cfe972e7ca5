"""`ibwire lab up|down|status|traffic`: a switchdev-like PF host with four VFs and a remote host in netns."""
from typing import Optional

import typer

from .app import app

lab_app = typer.Typer(help="Network-namespace lab: PF host, VF representors, four VFs and a remote host.",
                      no_args_is_help=True)
app.add_typer(lab_app, name="lab")


@lab_app.command("up")
def lab_up(prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces."),
           vlan: Optional[int] = typer.Option(None, help="Put the hosts on this 802.1Q VLAN.")):
    """Build the lab (needs root)."""
    from ..lab import topology
    topology.up(prefix, vlan)
    print(topology.status(prefix))


@lab_app.command("down")
def lab_down(prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces.")):
    """Remove the lab's namespaces."""
    from ..lab import topology
    gone = topology.down(prefix)
    print(f"removed {len(gone)} namespaces" if gone else f"lab {prefix} was not up")


@lab_app.command("status")
def lab_status(prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces.")):
    """Show the lab's hosts, MACs, IPs and representors."""
    from ..lab import topology
    print(topology.status(prefix))


@lab_app.command("traffic")
def lab_traffic(scenario: str = typer.Argument(..., help="A RoCEv2 capture file or an `ibwire synth` scenario."),
                prefix: str = typer.Option("ibwlab", help="Name prefix of the namespaces."),
                pairs: Optional[str] = typer.Option(None, help="Host pairs for a two-endpoint capture, e.g. "
                                                    "vf0-remote,vf2-vf1 (endpoint A plays the first)."),
                map_: Optional[str] = typer.Option(None, "--map", help="Explicit CAPTURE_IP=HOST,... mapping.")):
    """Replay a scenario's RoCEv2 packets between lab hosts with their MACs and IPs."""
    from ..errors import UserError
    from ..lab import topology, traffic
    mapping = None
    if map_:
        try:
            mapping = dict(kv.split("=", 1) for kv in map_.split(","))
        except ValueError:
            raise UserError("--map takes CAPTURE_IP=HOST pairs separated by commas")
    sent = traffic.replay(topology.load(prefix), scenario, pairs, mapping)
    print(", ".join(f"{h}: {n} frames" for h, n in sent.items()))
