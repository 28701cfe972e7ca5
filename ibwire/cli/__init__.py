"""Command-line entry point.  Each command lives in its own module and registers on `app`."""
import sys

from ..errors import UserError
from .app import app
from . import decode  # noqa: F401  (each import registers its commands)


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
    except Exception as e:  # click usage errors and everything else
        import click
        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(2)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        print(f"ibwire: internal error ({type(e).__name__}: {e}); please report it with the input that caused it",
              file=sys.stderr)
        sys.exit(3)
