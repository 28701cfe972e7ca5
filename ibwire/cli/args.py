"""What the commands' shared arguments mean, apart from the CLI toolkit: the capture a command reads (its
argument or tshark's `-r`) and the port speed that turns pause quanta into seconds.  `ibwire health`'s quick
start (cli/healthrun.py) reads them without typer, the typer commands through cli/app.py."""

from typing import Optional

TOP = 20  # rows of a table on a terminal (`stats --top`, `flows --top`)
NO_CAPTURE = "name a capture file, as an argument or with -r"


def capture_source(file: Optional[str], read: Optional[str], missing: str = NO_CAPTURE) -> str:
    """The one capture a command reads, given as its argument or with -r."""
    from ibwire.errors import UserError

    if read is not None and file is not None:
        raise UserError("give the capture once, either as an argument or with -r")
    if read is None and file is None:
        raise UserError(missing)
    return str(read if read is not None else file)


def port_speed(text: str) -> float:
    """`100G`, `25g`, `400G`, `10000M` or plain bit/s → bit/s."""
    from ibwire.errors import UserError

    t = text.strip().upper().removesuffix("B/S").removesuffix("BPS")
    scale = {"G": 1e9, "M": 1e6, "T": 1e12}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if scale != 1 else t) * scale
    except ValueError:
        value = 0
    if not 1e6 <= value <= 1e13:
        raise UserError(f"--port-speed must be a speed such as 25G, 100G or 400G, not {text!r}")
    return value
