"""Command-line entry point.  Each command lives in its own module and registers on `app`."""
import sys

from ..errors import UserError
from .app import app
from . import convert, decode, capture, devices, lab, audit, synth, stats, flows, export, fabric  # noqa: F401  (each import registers its commands)


def main() -> None:
    """Run the CLI; user errors print one sentence, anything unexpected never shows a traceback."""
    try:
        app(standalone_mode=False)
    except UserError as e:
        print(f"ibwire: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except SystemExit:
        raise
    except Exception as e:  # usage errors of the CLI toolkit, and everything else
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(130)
        print(f"ibwire: internal error ({type(e).__name__}: {e}); please report it with the input that caused it",
              file=sys.stderr)
        sys.exit(3)
