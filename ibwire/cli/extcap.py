"""`ibwire extcap`: Wireshark's extcap interface, so Wireshark and tshark capture through ibwire."""

from typing import Optional

import typer

from ibwire.cli.app import app


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def extcap(
    ctx: typer.Context,
    list_interfaces: bool = typer.Option(False, "--extcap-interfaces", help="List ibwire's capture targets."),
    version: Optional[str] = typer.Option(None, "--extcap-version", help="Wireshark's version (ignored)."),
    list_dlts: bool = typer.Option(False, "--extcap-dlts", help="Link type of --extcap-interface."),
    show_config: bool = typer.Option(False, "--extcap-config", help="Options of --extcap-interface."),
    interface: Optional[str] = typer.Option(None, "--extcap-interface", help="The target (from the list)."),
    run: bool = typer.Option(False, "--capture", help="Capture the target into --fifo."),
    fifo: Optional[str] = typer.Option(None, "--fifo", help="The pipe Wireshark reads."),
    bpf: Optional[str] = typer.Option(None, "--extcap-capture-filter", help="Capture filter."),
    all_: bool = typer.Option(False, "--all", help="Every packet of the port, not only the VF's."),
    buffer_mib: Optional[int] = typer.Option(None, "--buffer-size", help="Kernel buffer in MiB."),
    install: bool = typer.Option(
        False,
        "--install",
        help="Put the ibwire launcher into Wireshark's personal "
        "extcap folder, so Wireshark and tshark list ibwire's targets.",
    ),
):
    """Wireshark extcap: `tshark -D` lists ibwire's VFs and ports, `tshark -i ibwire-...` captures through ibwire."""
    from ibwire.capture import extcap as ec
    from ibwire.errors import UserError

    if install:
        print(f"installed {ec.install()}; Wireshark and tshark now list ibwire's targets (`tshark -D`)")
    elif list_interfaces:
        print(ec.interfaces())
    elif list_dlts:
        print(ec.dlts(interface))
    elif show_config:
        print(ec.config())
    elif run:
        extra = (["--all"] if all_ else []) + (["--buffer-size", str(buffer_mib)] if buffer_mib else [])
        raise typer.Exit(ec.capture(interface, fifo, bpf, extra))
    else:
        raise UserError("give --install, --extcap-interfaces, --extcap-dlts, --extcap-config or --capture")
