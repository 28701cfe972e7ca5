"""The typer application every command module registers itself on."""
import typer

app = typer.Typer(
    name="ibwire",
    help="See what RDMA hides: capture, decode, analyse and audit InfiniBand and RoCE traffic.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root():
    """ibwire: capture, decode, analyse and audit InfiniBand and RoCE traffic."""
