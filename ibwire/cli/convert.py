"""`ibwire convert`: move captures between native-IB containers (ERF, link type 247) and RoCEv1."""

import sys

import typer

from ibwire.cli.app import app
from ibwire.files.convert import convert as do_convert


@app.command()
def convert(
    src: str = typer.Argument(..., help="input capture"),
    output: str = typer.Option(
        ...,
        "-o",
        "--output",
        help="output file (.pcapng keeps one interface per input interface; - for standard output)",
    ),
    link: str = typer.Option(
        "erf", "--link", help="erf (ERF type 21, what ibdump writes), ib (link type 247) or eth (RoCEv1)"
    ),
):
    """Rewrite a capture in another encapsulation, e.g. libpcap's link type 247 into ERF that tshark opens.
    What it says goes to standard error, so `-o -` leaves standard output a clean pcap."""
    stats = do_convert(src, output, link)
    print(f"wrote {stats['written']} packets to {'standard output' if output == '-' else output}", file=sys.stderr)
    for why, n in stats["reasons"].items():
        print(f"skipped {n} packets: {why}", file=sys.stderr)
    for problem in stats["problems"]:
        print(f"warning: {src}: {problem}", file=sys.stderr)
