"""How numbers are said in the sentences of messages and reports."""


def plural(n: int, noun: str) -> str:
    """`1 packet`, `2 packets`, `1,000 packets`."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
