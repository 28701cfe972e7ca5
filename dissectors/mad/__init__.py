"""Management datagrams (IBA Vol 1 ch. 12-16, Annex A10): `MAD` decodes a 256-byte MAD; class layers are
bound on MAD.mgmtclass and attribute layers chosen by MAD.attributeid through `table`.

    from dissectors.mad import MAD, flat
    pkt = MAD(mad_bytes); pkt.mysummary()  # 'SubnGet(NodeInfo)'; flat(pkt)['nodeinfo.nodetype']
"""
# ruff: noqa: I001  (imports stay in the order the class layers are to bind in)

from dissectors.mad.base import flat
from dissectors.mad.common import MAD, ClassPortInfo, InformInfo
from dissectors.mad.notice import Notice

from dissectors.mad import smp, virt, sa, perf, cm, cc, vendor  # noqa: F401  (bind the class layers)
from dissectors.mad.rmpp import reassemble, split_records
from dissectors.mad import table

__all__ = ["MAD", "flat", "reassemble", "split_records", "table", "ClassPortInfo", "InformInfo", "Notice"]
