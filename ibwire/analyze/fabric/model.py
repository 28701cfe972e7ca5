"""Rebuild nodes, ports, P_Key tables, the master SM, links and traps from a capture's SMPs.

Where an SMP's data belongs (IBA Vol 1 §14.2):
* directed-route SMPs are tied to a node by their route: the NodeInfo response reached over the same
  initial path (from the same requester, told apart by the upper 32 TID bits, which the sender's MAD
  layer owns) names the node and the port the SMP entered by (NodeInfo.LocalPortNum);
* LID-routed SMPs by LID: the responder's SLID (or a request's DLID) maps to a port through PortInfo.LID;
* PortInfo's attribute modifier is the port number (switches; 0 on a CA means the receiving port);
  P_KeyTable's modifier holds the block in bits 15-0 and, for switches, the port in bits 23-16 (§14.2.5.7).
Data comes from SubnGetResp (also the answer to a SubnSet: it carries the value after the write) and from
SubnSet requests, so a table is "as last read or written" even when a response is missing.  A builder may be
stricter about P_Key tables (`accept_table`): the audit takes only answers the master SM was shown.

This is the one model of the subnet: `ibwire fabric` views it, and the audit reads its facts from it, whether
built from the audited capture (audit.mads) or read back from `ibwire fabric --format json` (--state).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from dissectors.mad import MAD, flat
from dissectors.madnames import SM_STATES
from dissectors.numbers import PERMISSIVE_LID, PKEY_FULL_MEMBER
from ibwire.analyze.fabric.extract import iter_mads
from ibwire.analyze.fabric.rates import compare_link, port_modes

NODE_TYPES = {1: "CA", 2: "Switch", 3: "Router"}
PORT_STATES = {0: "NoChange", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
_ATTRS = {
    0x0002: "notice",
    0x0010: "nodedescription",
    0x0011: "nodeinfo",
    0x0012: "switchinfo",
    0x0015: "portinfo",
    0x0016: "p_keytable",
    0x0020: "sminfo",
}
SUBN_GET_RESP, SUBN_SET, SUBN_TRAP = 0x81, 0x02, 0x05


@dataclass
class Port:
    node_guid: int
    port_num: int
    guid: Optional[int] = None
    lid: Optional[int] = None
    portinfo: Dict[str, int] = field(default_factory=dict)
    pkey_blocks: Dict[int, List[int]] = field(default_factory=dict)
    pkeys_how: str = ""  # "read" or "written"
    pkeys_frame: int = 0
    pkey_frames: List[Tuple[int, set]] = field(default_factory=list)  # (frame, P_Keys of that block) as taken


@dataclass
class Node:
    guid: int
    type: int = 0
    description: str = ""
    system_image_guid: int = 0
    num_ports: int = 0
    device_id: int = 0
    vendor_id: int = 0
    enhanced_port0: Optional[bool] = None  # SwitchInfo.EnhancedPort0 (§14.2.5.4), None until seen
    port_guids: Dict[int, int] = field(default_factory=dict)


def _wanted(mclass: int, method: int, attr: int, status: int) -> bool:
    """An SMP the model reads: a known attribute, GetResp/Set/Trap, status 0 (a directed route's D bit aside)."""
    ok = status & (0x7FFF if mclass == 0x81 else 0xFFFF) == 0
    return ok and attr in _ATTRS and method in (SUBN_GET_RESP, SUBN_SET, SUBN_TRAP)


def _route(f) -> Tuple[int, ...]:
    """A directed-route SMP's initial path, hops 1..HopCount (IBA §14.2.2; bytes, or hex text)."""
    raw = f.get("smpdirected.initialpath") or b""
    raw = bytes.fromhex(raw) if isinstance(raw, str) else raw
    return tuple(raw[1 : (f.get("smpdirected.hopcount") or 0) + 1])


class FabricBuilder:
    def __init__(self, accept_table=None):
        """`accept_table(mf, fields)`: whether a P_KeyTable GetResp or SubnSet is taken (default: all)."""
        self.accept_table = accept_table or (lambda mf, f: True)
        self.nodes: Dict[int, Node] = {}
        self.ports: Dict[Tuple[int, int], Port] = {}
        self.routes: Dict[Tuple[int, Tuple[int, ...]], Tuple[int, int]] = {}  # (requester, path) -> (node, in-port)
        self.lids: Dict[int, Tuple[int, int]] = {}
        self.sminfo: Dict[int, dict] = {}
        self.traps: List[dict] = []
        self.pending: List[tuple] = []
        self.set_tids = set()  # TIDs of SubnSet requests: their GetResp reports a write
        self.mads = 0
        self.smps = 0

    # -- where a MAD's data belongs -------------------------------------------------------------
    def _node(self, guid: int) -> Node:
        return self.nodes.setdefault(guid, Node(guid))

    def _port(self, node_guid: int, num: int) -> Port:
        return self.ports.setdefault((node_guid, num), Port(node_guid, num))

    def locate(self, mf, f) -> Optional[Tuple[int, int]]:
        """(node GUID, port the SMP entered by) for an SMP, or None when not known (yet)."""
        if f["mad.mgmtclass"] == 0x81:
            return self.routes.get((f["mad.transactionid"] >> 32, _route(f)))
        lid = mf.slid if f["mad.method"] & 0x80 else mf.dlid
        return self.lids.get(lid)

    def port_guid(self, node_guid: int, num: int) -> Optional[int]:
        """The GUID of a node's port (a switch's ports share port 0's), None when no NodeInfo named it."""
        p = self.ports.get((node_guid, num))
        if p is not None and p.guid:
            return p.guid
        node = self.nodes.get(node_guid)
        return node.port_guids.get(0 if node.type == 2 else num) if node else None

    # -- one MAD ----------------------------------------------------------------------------------
    def add(self, mf):
        """One MAD of the capture (`mf`: extract.MadFrame), decoded only when it is an SMP the model uses."""
        mad = mf.mad
        self.mads += 1
        if len(mad) < 24 or mad[1] not in (0x01, 0x81):
            return
        self.smps += 1
        status = int.from_bytes(mad[4:6], "big")
        if _wanted(mad[1], mad[3], int.from_bytes(mad[16:18], "big"), status):
            self._add(mf, flat(MAD(mad)))

    def offer(self, mf, f: dict) -> None:
        """add() for a MAD already decoded into its flat fields `f` (the audit's stream); `mf` gives the frame
        number, time and LIDs of the packet that carried it."""
        self.mads += 1
        cls = f.get("mad.mgmtclass")
        if cls not in (0x01, 0x81):
            return
        self.smps += 1
        if _wanted(cls, f.get("mad.method"), f.get("mad.attributeid"), f.get("mad.status") or 0):
            self._add(mf, f)

    def _add(self, mf, f: dict) -> None:
        attr, method = f["mad.attributeid"], f["mad.method"]
        if method == SUBN_SET:
            self.set_tids.add(f["mad.transactionid"])
        if attr == 0x0002:
            if method == SUBN_TRAP:
                self._trap(mf, f)
            return
        if method == SUBN_TRAP:
            return
        if attr == 0x0011:
            if method == SUBN_GET_RESP:
                self._nodeinfo(mf, f)
            return
        where = self.locate(mf, f)
        if where is None:
            self.pending.append((mf, f))
            if attr == 0x0020 and method == SUBN_GET_RESP:
                self._sminfo(mf, f, None)  # the claim counts now (the election); its port is placed later
            return
        self._apply(mf, f, where)

    def _nodeinfo(self, mf, f):
        guid = f["nodeinfo.nodeguid"]
        n = self._node(guid)
        n.type, n.num_ports = f["nodeinfo.nodetype"], f["nodeinfo.numports"]
        n.system_image_guid, n.device_id = f["nodeinfo.systemimageguid"], f["nodeinfo.deviceid"]
        n.vendor_id = f["nodeinfo.vendorid"]
        inport = 0 if n.type == 2 else f["nodeinfo.localportnum"]
        n.port_guids[inport] = f["nodeinfo.portguid"]
        self._port(guid, inport).guid = f["nodeinfo.portguid"]
        if f["mad.mgmtclass"] == 0x81:
            self.routes[(f["mad.transactionid"] >> 32, _route(f))] = (guid, f["nodeinfo.localportnum"])
        else:  # LID-routed: the responder's SLID is the port's (a switch's port 0's) until PortInfo says
            self.lids.setdefault(mf.slid, (guid, inport))
            p = self._port(guid, inport)
            p.lid = p.lid or (mf.slid if mf.slid != PERMISSIVE_LID else None)

    def _apply(self, mf, f, where):
        node_guid, inport = where
        node = self._node(node_guid)
        attr = f["mad.attributeid"]
        mod = f["mad.attributemodifier"]
        if attr == 0x0010:
            node.description = f.get("nodedescription.nodestring") or ""
        elif attr == 0x0012:
            node.enhanced_port0 = bool(f.get("switchinfo.enhancedportzero", 0))
        elif attr == 0x0015:
            num = mod & 0xFF if node.type == 2 else (mod & 0xFF or inport)
            p = self._port(node_guid, num)
            p.portinfo = {
                k.split(".", 1)[1]: v for k, v in f.items() if k.startswith("portinfo.") and isinstance(v, int)
            }
            lid = p.portinfo.get("lid", 0)
            if node.type != 2 or num == 0:
                p.lid = lid
                if lid:
                    for j in range(1 << p.portinfo.get("lmc", 0)):
                        self.lids[lid + j] = (node_guid, num)
        elif attr == 0x0016 and self.accept_table(mf, f):
            num = (mod >> 16) & 0xFF if node.type == 2 else inport
            p = self._port(node_guid, num)
            keys = f.get("p_keytable.p_keybase") or []
            members = f.get("p_keytable.membershiptype") or []
            keys = keys if isinstance(keys, list) else [keys]
            members = members if isinstance(members, list) else [members]
            p.pkey_blocks[mod & 0xFFFF] = [(m << 15) | k for m, k in zip(members, keys)]
            p.pkey_frames.append((mf.number, set(p.pkey_blocks[mod & 0xFFFF]) - {0, PKEY_FULL_MEMBER}))
            written = f["mad.method"] == SUBN_SET or f["mad.transactionid"] in self.set_tids
            p.pkeys_how = "written" if written else "read"
            p.pkeys_frame = mf.number
        elif attr == 0x0020 and f["mad.method"] == SUBN_GET_RESP:
            port = self.ports.get((node_guid, inport)) or self.ports.get((node_guid, 0))
            self._sminfo(mf, f, port.lid if port else None)

    def _sminfo(self, mf, f, lid: Optional[int]):
        """An SMInfo answer stands on its own: it names its SM's port GUID, so it is kept even when no
        NodeInfo places the port; the LID is then the responder's SLID of a LID-routed SMP, or the LID of
        the port with that GUID, else None."""
        guid = f["sminfo.guid"]
        if self.sminfo.get(guid, {}).get("frame", 0) > mf.number:
            return
        if lid is None and f["mad.mgmtclass"] == 0x01:
            lid = mf.slid
        self.sminfo[guid] = {
            "guid": guid,
            "priority": f["sminfo.priority"],
            "state": SM_STATES.get(f["sminfo.smstate"], str(f["sminfo.smstate"])),
            "actcount": f["sminfo.actcount"],
            "sm_key": f["sminfo.sm_key"],
            "lid": lid,
            "frame": mf.number,
        }

    def _trap(self, mf, f):
        details = {k: (v.hex() if isinstance(v, bytes) else v) for k, v in f.items() if k.startswith("trap.")}
        generic = f.get("notice.isgeneric", 1)
        self.traps.append(
            {
                "frame": mf.number,
                "time": mf.time,
                "slid": mf.slid,
                "dlid": mf.dlid,
                "generic": bool(generic),
                "type": f.get("notice.type"),
                "number": f.get("notice.trapnumberdeviceid") if generic else None,
                "issuer_lid": f.get("notice.issuerlid"),
                "details": details,
            }
        )

    def finish(self):
        for mf, f in self.pending:
            where = self.locate(mf, f)
            if where is not None:
                self._apply(mf, f, where)
            elif f["mad.attributeid"] == 0x0020 and f["mad.method"] == SUBN_GET_RESP:
                self._sminfo(mf, f, None)
        self.pending = []
        for (node_guid, num), p in self.ports.items():
            node = self.nodes.get(node_guid)
            if node and p.guid is None:
                p.guid = node.port_guids.get(0 if node.type == 2 else num)
            if node and node.type == 2 and num:
                sw0 = self.ports.get((node_guid, 0))
                p.lid = sw0.lid if sw0 else None
        lids = {p.guid: p.lid for p in self.ports.values() if p.guid is not None and p.lid}
        for s in self.sminfo.values():
            s["lid"] = s["lid"] or lids.get(s["guid"])

    # -- links from directed routes -----------------------------------------------------------------
    def links(self) -> List[dict]:
        seen, out = set(), []
        for (req, path), (guid_b, in_b) in self.routes.items():
            if not path:
                continue
            a = self.routes.get((req, path[:-1]))
            if a is None:
                continue
            end_a, end_b = (a[0], path[-1]), (guid_b, in_b)
            key = tuple(sorted((end_a, end_b)))
            if key in seen:
                continue
            seen.add(key)
            link = {
                "a": {"node_guid": end_a[0], "port_num": end_a[1]},
                "b": {"node_guid": end_b[0], "port_num": end_b[1]},
            }
            pa, pb = self.ports.get(end_a), self.ports.get(end_b)
            if pa and pb and pa.portinfo and pb.portinfo:
                link.update(compare_link(port_modes(pa.portinfo), port_modes(pb.portinfo)))
            out.append(link)
        return sorted(out, key=lambda l: (l["a"]["node_guid"], l["a"]["port_num"]))


def build(path: str) -> FabricBuilder:
    b = FabricBuilder()
    for mf in iter_mads(path):
        b.add(mf)
    b.finish()
    return b
