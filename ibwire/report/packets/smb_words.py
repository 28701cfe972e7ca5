"""How tshark words the SMB Direct and SMB2 items of `-V` (packet-smb-direct.c, packet-smb2.c): a flags
word followed by the names of its set bits, message ids without a value name as plain numbers, the header's
process id (named `smb2.pid` by tshark 4.0), the channel info blob's descriptors counted, empty blobs as NO
DATA, and the items ibwire generates (a response's request, its time) in brackets."""

from ibwire.report.packets.ws_labels import FIELDS, VALUES

GENERATED = {"smb2.response_to", "smb2.time"}
WHOLE = {
    "smb2.header_reserved": lambda v: f"Process Id: {v}",
    "smb2.channel_info_blob": lambda v: f"Channel Info Blob: {v or 'NO DATA'}",  # an FT_NONE item in tshark 4.0
}


def _flags(key: str):
    """A flags word and the labels of its set boolean bits, lowest bit first (proto_tree_add_bitmask)."""
    bits = sorted((s[3], s[0]) for k, s in FIELDS.items() if k.startswith(key + ".") and s[1] == "FT_BOOLEAN")
    return lambda v: ", ".join([v] + [label for mask, label in bits if int(v, 0) & mask])


def _special(key: str):
    """A value with a name shown as `name (n)`, any other as the plain number (BASE_SPECIAL_VALS)."""
    return lambda v: f"{VALUES[key][int(v, 0)]} ({v})" if int(v, 0) in VALUES.get(key, {}) else v


WORDED = {
    "smb_direct.flags": _flags("smb_direct.flags"),
    "smb2.flags": _flags("smb2.flags"),
    "smb2.msg_id": _special("smb2.msg_id"),
}


def title(key: str, value: list) -> str:
    """The line of an item that holds others: the channel info blob's buffer descriptors."""
    if key == "smb2.channel_info_blob":
        return f"Channel Info Blob: SMBDirect Buffer Descriptor V1: ({len(value)} elements)"
    return ""


def line(key: str, value, text: str) -> str:
    """An empty READ response data blob: tshark adds that there is none."""
    return text + ": NO DATA" if key == "smb2.read.blob" and not value else text
