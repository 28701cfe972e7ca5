"""NFS-over-RDMA layers in tshark 4.4's -T json shape: each of `rpcordma`, `rpc` and `nfs` is its tree
(dissectors.rpcrdmatable) with every leaf written as tshark writes its value."""

from ibwire.report.packets.values import value_text


def _items(tree) -> list:
    out = []
    for key, value in tree:
        if isinstance(value, list):
            out.append((key, _items(value)))
        elif not key.startswith("_"):
            out.append((key, value_text(key, value)))
    return out


def tree_layers(layer, malformed) -> list:
    """[(protocol, items)] of a dissectors.rpcrdma layer, then tshark's Malformed Packet (`malformed`) when
    it was cut."""
    cut = [malformed] if any(k == "_truncated" for k, _ in layer.tree) else []
    return [(getattr(layer, "json_name", layer.ws_name), _items(layer.tree))] + cut
