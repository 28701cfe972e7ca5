"""TCP's and ICMP's fields (ibwire.decode.docfields) from tshark's document of a frame, as `-Y`, `-e` and
`-T json -e` take them: the document's state across frames (tcp.stream, relative numbers, icmp.resp_to) is
tshark's single pass, so each user keeps a tshark_doc.Session fed with the frames in order.
"""

from ibwire.decode.docfields import TYPES, field_text, typed


def add_tcp_icmp(items: list, found: dict) -> dict:
    """The tcp.* and icmp.* fields of a layer's items (docfields.TYPES) into `found` (name -> values), a
    subtree's own name (tcp.analysis) with the value None."""
    for k, v in items:
        if isinstance(v, list):
            if k in TYPES:
                found.setdefault(k, []).append(None)
            add_tcp_icmp(v, found)
        elif k in TYPES:
            found.setdefault(k, []).append(v)
    return found


def filter_values(layers: list) -> dict:
    """A frame's tcp.* and icmp.* fields from its tshark document, typed as the display filter compares them
    (one value, or a list of the occurrences)."""
    found: dict = {}
    for name, items in layers:
        if name in ("tcp", "icmp"):
            add_tcp_icmp(items, found)
    return {k: typed(k, v[0]) if len(v) == 1 else [typed(k, x) for x in v] for k, v in found.items()}


def only_fields(layers: list, keys: list) -> list:
    """-T json/ek -e: tshark_doc.only_fields, the tcp.* and icmp.* fields as -T fields prints them (tshark
    writes the same text in both)."""
    from ibwire.report.packets.tshark_doc import only_fields as named

    ours: dict = {}
    for name, items in layers:
        if name in ("tcp", "icmp"):
            add_tcp_icmp(items, ours)
    found = dict(named(layers, [k for k in keys if k not in TYPES]))
    found.update({k: [field_text(k, v) for v in ours[k]] for k in keys if k in ours})
    return [(k, found[k]) for k in keys if k in found]


def filter_documents(flt):
    """For ibwire.decode.stream.select: (decoded frame, ns) -> its tcp.* and icmp.* fields for the filter, from
    tshark's document with its state across frames, and those of the datagram an ICMP error carries
    (icmp_filter); None when the filter names none."""
    from ibwire.report.packets.icmp_filter import carried_keys, carried_values, is_error

    tcp_icmp, carried = any(k.startswith(("tcp.", "icmp.")) for k in flt.fields), carried_keys(flt.fields)
    if not tcp_icmp and not carried:
        return None
    session = []  # (its tshark_doc.Session, made with the first document: a filter on udp.* starts without it)

    def values(d, ns) -> dict:
        error = bool(carried) and is_error(d.flat)
        if not error and not (tcp_icmp and ("tcp" in d.layers or "icmp" in d.layers)):
            return {}
        from ibwire.report.packets import tshark_doc as td

        session[:] = session or [td.Session()]
        layers = td.document(d, td.Times(ns, 0, 0, 0), session[0])
        found = filter_values(layers) if tcp_icmp else {}
        return {**found, **carried_values(d.flat, layers, carried)} if error else found

    return values
