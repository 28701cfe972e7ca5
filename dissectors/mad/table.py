"""The MAD table (dissectors.madnames, the one source of MAD names) with each attribute's scapy layer,
resolved by class name through base.REGISTRY, so this module imports no layer."""

from dissectors.mad.base import REGISTRY
from dissectors.madnames import *  # noqa: F401,F403  (the table's names, as dissectors.mad.table.X)
from dissectors.madnames import ATTRIBUTES, family


def attribute(mgmtclass, attrid):
    """(name, layer class or None) of an attribute; (None, None) when unknown."""
    name, layer = ATTRIBUTES.get(family(mgmtclass), {}).get(attrid, (None, None))
    return name, REGISTRY.get(layer) if layer else None
