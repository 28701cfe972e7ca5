"""NVMe-oF layers in tshark 4.4's -T json shape: `nvme-rdma` (queue id; fabrics commands and their
completions inside it, as `nvme.fabrics.cmd` / `nvme.fabrics.cqe`) and `nvme` (admin and I/O commands and
completions); bits of a field in `<field>_tree`, the keyed SGL in its own container."""

from dissectors.nvmetable import SGL
from ibwire.decode.nvme import layer_kind, linked
from ibwire.report.packets.nvme_data_words import Titled, numbered
from ibwire.report.packets.values import value_text

SGL_KEYS = [r.key for r in SGL]
SGL_ORDER = [
    "nvme.cmd.sgl.type",
    "nvme.cmd.sgl.subtype",
    "nvme.cmd.sgl1.addr",
    "nvme.cmd.sgl1.len",
    "nvme.cmd.sgl1.key",
]


def _text(key, flat):
    v = flat[key]
    return repr(v) if isinstance(v, float) else value_text(key, v)  # latency in ms as tshark prints it


PROPERTY = "nvme.fabrics.prop_get_set.data"
REGISTER = ("nvme.fabrics.prop_get_set.", "nvme.fabrics.prop_get.")  # a property's fields (CC, CSTS; CAP, VS)


def _items(layer, flat) -> list:
    """The rows of a dissectors.nvme TableLayer as tshark lists them; a Property Get/Set's register (the rows
    after its `data`) in the data's own tree."""
    data = layer.original or bytes(layer)
    rows = list(layer.rows)
    register = [r for r in rows if r.key.startswith(REGISTER) and r.key != PROPERTY]
    if not register or all(r.key != PROPERTY for r in rows):
        return _listed(layer, rows, data)
    rest = [r for r in rows if r not in register]
    items = _listed(layer, rest, data)
    i = next(n for n, (k, _) in enumerate(items) if k == PROPERTY)
    items.insert(i + 1, (PROPERTY + "_tree", _listed(layer, register, data)))
    return items


DSM = "nvme.cmd.dsm"  # a Read's or Write's Dataset Management bits, in tshark's text item DSM Flags


def _listed(layer, rows, data) -> list:
    items, tree_of, named = [], {}, {}
    sgl = [k for k in SGL_ORDER if any(r.key == k for r in rows)]
    for r in rows:
        if r.key in SGL_KEYS:
            if r.key == SGL_KEYS[0]:
                name = (
                    "nvme.fabrics.cmd.connect.sgl1"
                    if layer.rows[0].key.startswith("nvme.fabrics")
                    and any(x.key.startswith("nvme.fabrics.cmd.connect") for x in rows)
                    else "nvme.cmd.sgl1"
                )
                items.append((name, [(k, value_text(k, _value(layer, k, data))) for k in sgl]))
            continue
        text = value_text(r.key, _value(layer, r.key, data))
        if r.key.startswith(DSM + ".") and DSM not in named:  # a container of its own, as the SGL
            named[DSM] = []
            items.append((DSM, named[DSM]))
        if r.mask:  # in the tree of the whole bytes, or of the bits it is named under (prinfo.guard)
            parent = named.get(r.key.rpartition(".")[0], tree_of.get((r.off, r.size)))
            if parent is not None:
                parent.append((r.key, text))
                continue
        items.append((r.key, text))
        tree = named[r.key] = []
        items.append((r.key + "_tree", tree))
        if not r.mask:
            tree_of[(r.off, r.size)] = tree
    return [i for i in items if not (i[0].endswith("_tree") and not i[1])]


def _value(layer, key, data):
    from dissectors.nvmetable import value

    return value(next(r for r in layer.rows if r.key == key), data)


# Entries packet-nvme.c puts each in the tree of the one before it (it reuses the subtree variable): the
# Commands Supported and Effects log page's, one chain per group (admin, I/O)
CHAINED = "nvme.cmd.get_logpage.cmd_and_eff.cs"


def _nested(layer, rows) -> list:
    """A data structure's rows as tshark nests them: each row in the tree of the row before it whose bytes
    hold it (bits of a row in that row's tree), a CHAINED entry in the tree of the entry just before it."""
    from dissectors.nvmetable import value

    data = layer.original or bytes(layer)
    items, open_ = [], []  # (offset, end, tree, key) of the rows that may hold the next
    for r in rows:
        while open_ and not (open_[-1][0] <= r.off and r.off + r.size <= open_[-1][1]):
            if r.key == CHAINED and open_[-1][3] == CHAINED and open_[-1][1] == r.off:
                break
            open_.pop()
        into = open_[-1][2] if open_ else items
        into.append((r.key, numbered(r.key, layer, r.off, value_text(r.key, value(r, data)))))
        if not r.mask:
            tree = []
            into.append((r.key + "_tree", tree))
            open_.append((r.off, r.off + r.size, tree, r.key))
    return _pruned(items)


# tshark 4.4's Malformed Packet layer (4.0 wrote `_ws.malformed` for `_ws.malformed.expert`, without the last item)
MALFORMED = (
    "_ws.malformed",
    [
        (
            "_ws.expert",
            [
                ("_ws.malformed.expert", ""),
                ("_ws.expert.message", "Malformed Packet (Exception occurred)"),
                ("_ws.expert.severity", "8388608"),
                ("_ws.expert.group", "117440512"),
            ],
        ),
        ("_ws.malformed", "Malformed Packet"),
    ],
)


class Empty(str):
    """The value of a layer tshark opens and puts nothing in (`"nvme": "NVM Express"` in -T json): its text in
    -T json, no item to -V and -T ek, which iterate a layer's items."""

    def __iter__(self):
        return iter(())


EMPTY = Empty("NVM Express")
NESTED = Titled("NVM Express")  # the same in an RDMA READ response's tree: an item -V shows by its title
NESTED.title = NESTED


def _pruned(items) -> list:
    return [(k, _pruned(v) if isinstance(v, list) else v) for k, v in items if v != [] or not k.endswith("_tree")]


def transfer_layers(layer, flat, kind: str) -> list:
    """The layers of a packet of data a command moved (dissectors.nvme.data_layer): the links in
    nvme-rdma, the Connect command's data beside them, other structures in nvme."""
    rdma = frame_layers(flat, False)
    items = _nested(layer, layer.rows)
    if kind == "connect data":
        return _read(rdma, items)
    return _beside(rdma, flat, items) + ([MALFORMED] if layer.cut else [])


def _read(rdma, items) -> list:
    """`rdma` with `items` added to the tree of the RDMA READ response it holds."""
    for key, links in rdma[0][1] if rdma else ():
        if key == "nvme-rdma.read_from_host_resp_tree":
            links += items
    return rdma


def _beside(rdma, flat, nvme) -> list:
    """The nvme layer holding `nvme` after the frame's nvme-rdma layer `rdma`, or in its RDMA READ response's tree
    (data read from the host: packet-nvme-rdma.c dissects it there)."""
    if rdma and "nvme-rdma.read_from_host_resp" in flat:
        return _read(rdma, [("nvme", NESTED if nvme is EMPTY else nvme)])
    return rdma + [("nvme", nvme)]


def nvme_layers(layer, flat) -> list:
    """[(protocol, items)] of the NVMe layer `layer` (a TableLayer, NVMeData or NVMeUnknown): the protocols
    ibwire.decode.nvme.layer_protocols names, which a filter's bare `nvme` / `nvme-rdma` follow too."""
    qid = [("nvme-rdma.cmd.qid", _text("nvme-rdma.cmd.qid", flat))] if "nvme-rdma.cmd.qid" in flat else []
    kind = layer_kind(layer, flat)
    if kind in ("data", "connect data"):
        return transfer_layers(layer, flat, kind)
    if kind == "empty":
        return _beside(frame_layers(flat, False), flat, EMPTY)
    if kind in ("nvme", "nvme-rdma"):  # the bytes alone
        field = layer.fields_desc[0].name
        key = f"{layer.ws_name}.{field}"
        item = (key, value_text(key, bytes(layer.getfieldval(field))))
        return [("nvme-rdma", qid + [item])] if kind == "nvme-rdma" else [("nvme", [item])]
    if kind == "cm":
        return [("nvme-rdma", _items(layer, flat))]
    cqe = any(r.key == "nvme.cqe.cid" for r in layer.rows)
    tracked = [
        (k, _text(k, flat))
        for k in ("nvme.fabrics.cmd_pkt", "nvme.fabrics.cmd_latency", "nvme.cmd_pkt", "nvme.cmd_latency")
        if k in flat
    ]
    if kind == "fabrics":
        return [
            ("nvme-rdma", qid + [("nvme.fabrics.cqe" if cqe else "nvme.fabrics.cmd", tracked + _items(layer, flat))])
        ]
    return [("nvme-rdma", qid), ("nvme", tracked + _items(layer, flat))]


LINKS = (
    "nvme.fabrics.cmd_pkt",
    "nvme.fabrics.data_req",
    "nvme-rdma.read_from_host_prev",
    "nvme-rdma.write_to_host_prev",
)


def frame_layers(flat, shown: bool) -> list:
    """The nvme-rdma layer of a frame without an NVMe payload layer (`shown` False): RDMA-CM private data,
    or the queue id and links of an RDMA READ/WRITE moving a command's data."""
    if shown:
        return []
    cm = [(k, _text(k, flat)) for k in flat if k.startswith("nvme-rdma.cm.")]
    if cm:
        return [("nvme-rdma", cm)]
    if not linked(flat):
        return []
    items = [("nvme-rdma.cmd.qid", _text("nvme-rdma.cmd.qid", flat))]
    links = [(k, _text(k, flat)) for k in LINKS if k in flat]
    if "nvme-rdma.read_to_host_req" in flat:
        items.append(("nvme-rdma.read_to_host_req", links))
    elif "nvme-rdma.read_from_host_resp" in flat:
        items += [
            (
                "nvme-rdma.read_from_host_resp",
                value_text("nvme-rdma.read_from_host_resp", bytes.fromhex(flat["nvme-rdma.read_from_host_resp"])),
            ),
            ("nvme-rdma.read_from_host_resp_tree", links),
        ]
    elif "nvme-rdma.write_to_host_req" in flat:
        items.append(("nvme-rdma.write_to_host_req", links))
    return [("nvme-rdma", items)]
