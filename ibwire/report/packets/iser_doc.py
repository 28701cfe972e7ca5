"""iSER layers in tshark 4.4's -T json shape: `iser`, `iscsi` and `scsi` are their trees
(dissectors.iscsitable) with every leaf written as tshark writes its value; the SBC fields are shown
inside `scsi`, as tshark does."""

from ibwire.report.packets.rpcrdma_doc import tree_layers


def iser_layers(layer, malformed) -> list:
    """[(protocol, items)] of a dissectors.iser layer (none for its SBC copy), then tshark's Malformed
    Packet when it was cut."""
    return [] if layer.ws_name == "scsi_sbc" else tree_layers(layer, malformed)
