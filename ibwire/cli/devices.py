"""`ibwire devices`: RDMA devices, ports, SR-IOV VFs, eswitch mode and which capture backends can run."""
import json as _json

import typer

from .app import app


@app.command()
def devices(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """List RDMA devices and ports, their VFs, and what can capture them here."""
    from ..capture.inventory import inventory, render
    inv = inventory()
    print(_json.dumps(inv, indent=1, default=str) if as_json else render(inv))
