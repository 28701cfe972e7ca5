"""Errors meant for the user: the CLI prints their message as one sentence, never a traceback."""


class UserError(Exception):
    """Wrong arguments, unreadable input, missing privileges or hardware; exit status 2."""

    exit_code = 2
