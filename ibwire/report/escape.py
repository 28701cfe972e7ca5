"""Text from packets and files made safe for a terminal: a control character is shown, never sent.

As tshark shows a string field (wsutil/str_util.c format_text), a control character becomes its C escape
(`\\n`, `\\t`, `\\a` …) or `\\xHH` (ESC: the four characters `\\x1b`), so a node description or tenant
name cannot move the cursor, retitle the window or hide text.  C1 controls (U+0080-U+009F, CSI among
them) and the bidirectional overrides that reorder what a reader sees (U+202A-U+202E, U+2066-U+2069) are
escaped too.  rich markup in names is kept literal by printing them as rich Text, not markup.
"""

import re

_NAMED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def _octal(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x80 else f"\\u{ord(c):04x}")


def printable(text, octal: bool = False) -> str:
    """`text` (any value: str() of it) with every control character escaped; `octal`: an unnamed ASCII
    control as `\\ooo`, the way tshark -V writes it (ESC: `\\033`)."""
    text = str(text)
    return _UNSAFE.sub(_octal if octal else _escape, text) if _UNSAFE.search(text) else text
