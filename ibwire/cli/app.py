"""The typer application every command module registers itself on; `--version`, `-h` and shell
completion (`--install-completion` / `--show-completion`, typer's, for bash, zsh and fish); the capture
arguments the reading commands share (positional or tshark's `-r`)."""

import inspect
from typing import List, Optional

import typer

# (the commands import these from here; cli/args.py holds them apart from typer)
from ibwire.cli.args import NO_CAPTURE, TOP, capture_source, port_speed  # noqa: F401


class Typer(typer.Typer):
    """typer.Typer whose commands' help flows as sentences: rich help keeps a docstring's line breaks, which
    split a sentence wherever the source wrapped it, so they are joined (blank-line paragraphs stay)."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **kwargs)

        def flowing(f):
            if f.__doc__:
                f.__doc__ = "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(f.__doc__).split("\n\n"))
            return register(f)

        return flowing


app = Typer(
    name="ibwire",
    help="See what RDMA hides: capture, decode, analyse and audit InfiniBand and RoCE traffic.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool):
    if value:
        from ibwire import __version__

        typer.echo(f"ibwire {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="print ibwire's version and exit"
    ),
):
    """ibwire: capture, decode, analyse and audit InfiniBand and RoCE traffic."""


def read_file_option(several: bool = False):
    """tshark's `-r FILE`, beside the positional capture (repeatable where a command takes several)."""
    return typer.Option(
        None, "-r", "--read-file", help="the capture, as tshark -r" + (" (repeatable)" if several else "")
    )


def capture_sources(args: Optional[List], read: Optional[List]) -> List[str]:
    """The captures a command that takes several reads: its arguments, then those given with -r."""
    return [str(p) for p in list(args or []) + list(read or [])]


def port_speed_option():
    """The Ethernet port speed that turns pause quanta (512 bit times each) into seconds."""
    return typer.Option(
        "100G",
        "--port-speed",
        help="port speed for pause times in seconds (a quantum is 512 bit "
        "times), e.g. 25G, 100G, 400G; a capture does not record it",
    )
