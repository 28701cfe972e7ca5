"""NVMe over Fabrics on RDMA as scapy layers, built from the rows of dissectors.nvmetable (Wireshark 4.4's
`nvme.*` and `nvme-rdma.*` names): command capsules (the 64-byte SQE, then in-capsule data), completions
(16-byte CQE) and the RDMA-CM private data of NVMe-oF queues.  Which layer a payload is depends on the
queue and, for a completion, on its command: ibwire.decode.nvme follows that across frames.
"""

from scapy.fields import LEIntField, LELongField, LEShortField, LEThreeBytesField, StrFixedLenField, XByteField

from dissectors.base import IBLayer
from dissectors.nvmetable import (
    ADMIN,
    CM_REJ,
    CM_REP,
    CM_REQ,
    CNS_CTRL,
    CNS_NS,
    CNS_NS_LIST,
    CONNECT_FCTYPE,
    CQE,
    CQE_CONNECT,
    CQE_LEN,
    CQE_NUMBER_OF_QUEUES,
    CQE_PROP_GET,
    CQE_PROP_SET,
    DISPLAY,
    FABRICS,
    FABRICS_HEAD,
    FABRICS_OPC,
    FEATURES,
    GENERIC,
    GET_LOG_PAGE_OPC,
    IDENTIFY_OPC,
    IO,
    LID_DISCOVERY,
    LID_EFFECTS,
    LID_SMART,
    PROP_SET,
    PROPERTIES,
    SET_FEATURES_HEAD,
    SET_FEATURES_TAIL,
    SQE_HEAD,
    SQE_LEN,
    command_kind,
    completion_rows,
    data_rows,
    effects_entries,
    value,
)

_INT = {1: XByteField, 2: LEShortField, 3: LEThreeBytesField, 4: LEIntField, 8: LELongField}


class TableLayer(IBLayer):
    """A layer whose bytes are laid out by `rows` (all keys start with `ws_name`): the scapy fields hold
    the bytes (hidden names: scapy wants identifiers), ws_extra gives every row by its Wireshark name."""

    rows = ()
    length = 0
    at = None  # a data structure's packet: its offset in the transfer (dissectors.nvme.data_layer)
    cdw10 = 0  # … and the low byte of its command's CDW10 (CNS, log page ID)
    opc = 0  # … and its command's opcode
    titles = None  # … its entries' -V titles by offset in the packet, where tshark words them per packet
    cut = False  # … Wireshark's reading of it ran past the packet's end (a Malformed Packet)

    def ws_extra(self):
        """Each row by name; a name repeated (entries of a data structure) holds the list of its values, as
        tshark shows every occurrence to -e and -Y."""
        data, out = self.original or bytes(self), {}
        for r in self.rows:
            out.setdefault(r.key[len(self.ws_name) + 1 :], []).append(value(r, data))
        return {k: v[0] if len(v) == 1 else v for k, v in out.items()}

    def extract_padding(self, s):
        return s[: self.length], s[self.length :]


def table_layer(cls_name: str, ws_name: str, rows, length: int, summary: str = ""):
    """A TableLayer class for `rows`: the bytes no whole-byte row covers are hidden `_gap` fields."""
    fields, at = [], 0
    for r in sorted((r for r in rows if not r.mask), key=lambda r: r.off):
        if r.off < at:
            continue  # a second view of bytes already laid out (lpo over dwords 12-13)
        if r.off > at:
            fields.append(StrFixedLenField(f"_gap{at}", b"\0" * (r.off - at), r.off - at))
        name = f"_{r.off}_" + r.key[len(ws_name) + 1 :].replace(".", "_")  # a name may repeat (entries)
        if r.size in _INT and DISPLAY.get(r.key) != -1:
            fields.append(_INT[r.size](name, 0))
        else:
            fields.append(StrFixedLenField(name, b"\0" * r.size, r.size))
        at = r.off + r.size
    if at < length:
        fields.append(StrFixedLenField(f"_gap{at}", b"\0" * (length - at), length - at))
    return type(
        cls_name,
        (TableLayer,),
        {
            "name": summary or cls_name,
            "ws_name": ws_name,
            "rows": tuple(rows),
            "length": length,
            "fields_desc": fields,
            "__module__": __name__,
        },
    )


class NVMeData(IBLayer):
    """In-capsule data after the SQE, or a transfer's data (shown as Wireshark's nvme.data)."""

    ws_name = "nvme"
    fields_desc = [StrFixedLenField("data", b"", length_from=lambda p: len(p.original or b""))]

    def extract_padding(self, s):
        return s, b""


class NVMeEmpty(IBLayer):
    """The data of a command that Wireshark 4.4 opens its `nvme` layer on and shows nothing of (an I/O command's,
    an Identify's of a CNS it does not decode, in an RDMA WRITE): the layer, no field."""

    ws_name = "nvme"
    empty = True
    fields_desc = [StrFixedLenField("_data", b"", length_from=lambda p: len(p.original or b""))]

    def extract_padding(self, s):
        return s, b""


class NVMeUnknown(IBLayer):
    """A payload on an NVMe-oF queue that is neither a capsule nor a matched completion."""

    ws_name = "nvme-rdma"
    fields_desc = [StrFixedLenField("unknown_data", b"", length_from=lambda p: len(p.original or b""))]

    def extract_padding(self, s):
        return s, b""


def _layers():
    out = {}
    kinds = [("Fabrics" + n.replace(" ", ""), r, FABRICS_HEAD) for n, r in FABRICS.values()]
    kinds += [("Admin" + n.replace(" ", ""), r, SQE_HEAD) for n, r in ADMIN.values()]
    kinds += [("IO" + n, r, SQE_HEAD) for n, r in IO.values()] + [("Command", GENERIC, SQE_HEAD)]
    kinds += [  # Set Features, its dword 11 by feature identifier
        (f"AdminSetFeatures{fid:02x}", SET_FEATURES_HEAD + dword11 + SET_FEATURES_TAIL, SQE_HEAD)
        for fid, dword11 in FEATURES.items()
    ]
    for name, rows, head in kinds:
        out[head + rows] = table_layer(f"NVMe{name}", "nvme", head + rows, SQE_LEN, f"NVMe {name}")
    out[FABRICS_HEAD] = table_layer("NVMeFabricsOther", "nvme", FABRICS_HEAD, SQE_LEN, "NVMe Fabrics command")
    for name, rows in (
        ("CQE", CQE),
        ("ConnectCQE", CQE_CONNECT),
        ("PropGetCQE", CQE_PROP_GET),
        ("PropSetCQE", CQE_PROP_SET),
        ("NumberOfQueuesCQE", CQE_NUMBER_OF_QUEUES),
    ):
        out[rows] = table_layer(f"NVMe{name}", "nvme", rows, CQE_LEN, f"NVMe {name}")
    for offset, prop in PROPERTIES.items():  # a Property Set and a Property Get's completion, per property
        at48 = tuple(r._replace(off=r.off + 48) for r in prop)
        out[FABRICS_HEAD + PROP_SET + at48] = table_layer(
            f"NVMeFabricsPropertySet{offset:02x}", "nvme", FABRICS_HEAD + PROP_SET + at48, SQE_LEN
        )
        out[CQE_PROP_GET + prop] = table_layer(f"NVMePropGetCQE{offset:02x}", "nvme", CQE_PROP_GET + prop, CQE_LEN)
    for name, rows, n in (("CMReq", CM_REQ, 32), ("CMRep", CM_REP, 32), ("CMRej", CM_REJ, 4)):
        out[rows] = table_layer(f"NVMeRDMA{name}", "nvme-rdma", rows, n, f"NVMe-oF RDMA {name}")
    return out


LAYERS = _layers()
globals().update({cls.__name__: cls for cls in LAYERS.values()})


def layer_class(rows, length: int):
    """The layer of `rows`; made on first use for rows that depend on the command (a property's value)."""
    if rows not in LAYERS:
        LAYERS[rows] = table_layer(f"NVMe{len(LAYERS)}", "nvme", rows, length, "NVMe")
    return LAYERS[rows]


def command_layer(payload: bytes, qid: int = 0):
    """The scapy packet of a command capsule: the SQE layer, then in-capsule data (NVMeData)."""
    name, rows = command_kind(payload, qid)
    pkt = layer_class(rows, SQE_LEN)(payload[:SQE_LEN])
    if len(payload) > SQE_LEN:
        pkt.add_payload(NVMeData(payload[SQE_LEN:]))
    return name, pkt


def completion_layer(payload: bytes, cmd_sqe=None, qid=None):
    return layer_class(completion_rows(cmd_sqe, qid), CQE_LEN)(payload[:CQE_LEN])


def _transfers():
    """The layers of whole data structures (dissectors.nvmedata), so that their fields are known before a
    capture shows them; a packet's share of a structure gets a layer of its own rows on first use."""
    out = {}
    for name, sqe, n in (
        ("IdentifyController", _sqe(IDENTIFY_OPC, CNS_CTRL), 4096),
        ("IdentifyNamespace", _sqe(IDENTIFY_OPC, CNS_NS), 4096),
        ("NamespaceList", _sqe(IDENTIFY_OPC, CNS_NS_LIST), 4),
        ("SMARTLog", _sqe(GET_LOG_PAGE_OPC, LID_SMART), 512),
        ("DiscoveryLog", _sqe(GET_LOG_PAGE_OPC, LID_DISCOVERY), 2048),
        ("CommandEffectsLog", _sqe(GET_LOG_PAGE_OPC, LID_EFFECTS), 4096),
        ("ConnectData", _sqe(FABRICS_OPC, 0, CONNECT_FCTYPE), 1024),
    ):
        rows = data_rows(sqe, 0, 0, bytes([1] * n))  # LBA formats and namespace IDs as 1s say
        out[rows, 0, sqe[0], sqe[40], sqe[48:56]] = _placed(
            table_layer(f"NVMe{name}", "nvme", rows, n, f"NVMe {name}"), sqe, 0, n
        )
    return out


def _placed(cls, sqe: bytes, at: int, n: int):
    """`cls`, the layer of the `n` bytes at `at` of what `sqe` moved, told where it lies and what tshark titles in
    it (the Commands Supported and Effects log page's entries, which it numbers per packet)."""
    cls.at, cls.cdw10, cls.opc = at, sqe[40], sqe[0]
    if sqe[0] == GET_LOG_PAGE_OPC and sqe[40] == LID_EFFECTS:
        entries, cls.cut = effects_entries(sqe, at, n)
        cls.titles = dict(entries)
    return cls


def _sqe(opc: int, cdw10: int, fctype: int = 0) -> bytes:
    return bytes([opc, 0, 0, 0, fctype]) + bytes(35) + bytes([cdw10]) + bytes(23)


TRANSFERS = _transfers()


def data_layer(sqe: bytes, qid, at: int, data: bytes):
    """The layer of the `data` at offset `at` of what the command `sqe` moved (an RDMA READ response or
    WRITE packet), or None when Wireshark shows no structure in it."""
    rows = data_rows(sqe, qid, at, data)
    if not rows:
        return None
    # `at` numbers the entries a packet holds (PSDn, DLEn), the opcode and CDW10 name the data (the log page), the
    # log page offset (CDW12-13) numbers the Commands Supported and Effects entries
    key = (rows, at, sqe[0], sqe[40], sqe[48:56])
    if key not in TRANSFERS:
        cls = table_layer(f"NVMeTransfer{len(TRANSFERS)}", "nvme", rows, len(data), "NVMe data")
        TRANSFERS[key] = _placed(cls, sqe, at, len(data))
    return TRANSFERS[key](data)


def cm_layer(attr: str, private: bytes):
    rows = {"req": CM_REQ, "rep": CM_REP, "rej": CM_REJ}[attr]
    return LAYERS[rows](private)


__all__ = [
    "TableLayer",
    "NVMeData",
    "NVMeEmpty",
    "NVMeUnknown",
    "command_layer",
    "completion_layer",
    "data_layer",
    "cm_layer",
]
