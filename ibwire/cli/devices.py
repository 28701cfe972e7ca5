"""`ibwire devices`: RDMA devices, ports, SR-IOV VFs, eswitch mode and which capture backends can run."""

import json as _json

import typer

from ibwire.cli.app import app


@app.command()
def devices(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """List RDMA devices and ports, their VFs, and what can capture them here."""
    from ibwire.capture.inventory import inventory, render
    from ibwire.report.escape import printable

    inv = inventory()
    # names come from sysfs (node descriptions, interface names): shown, never sent to the terminal raw
    print(
        _json.dumps(inv, indent=1, default=str)
        if as_json
        else "\n".join(printable(line) for line in render(inv).split("\n"))
    )
