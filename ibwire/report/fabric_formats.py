"""`fabric_view()` in the formats other tools read: ibnetdiscover's topology file and Graphviz DOT.

ibnetdiscover: the layout infiniband-diags' ibnetdiscover prints (src/ibnetdiscover.c, dump_topology:
a block per node — vendid, devid, sysimgguid, switchguid/caguid, the node line, one line per linked port —
with link width/speed names as ibdiag_common.c's *_compat functions spell them).  Nodes come switches
first, then CAs and routers, each by GUID; ibnetdiscover's own order follows its discovery walk.
"""

import time
from typing import Dict, List, Optional, Tuple

from dissectors.mad.table import LINK_SPEEDS, LINK_SPEEDS_EXT, LINK_WIDTHS
from ibwire.report.escape import printable

HAS_EXT_SPEEDS = 1 << 14  # PortInfo.CapabilityMask.IsExtendedSpeedsSupported


def _width(code) -> str:
    return LINK_WIDTHS.get(code or 0, "??")


def _speed(code, ext, cap) -> str:
    ext = ext if cap is not None and cap & HAS_EXT_SPEEDS else 0
    if ext:
        return LINK_SPEEDS_EXT.get(ext, "???")
    return LINK_SPEEDS.get(code or 0, "???")


class _Index:
    """Lookups over a view: nodes and ports by GUID, each port's remote end."""

    def __init__(self, view: dict):
        self.nodes = {n["guid"]: n for n in view["nodes"] if n["type"]}
        self.ports = {(p["node_guid"], p["port_num"]): p for p in view["ports"]}
        self.remote: Dict[Tuple[int, int], Tuple[int, int]] = {}
        for lk in view["links"]:
            a = (lk["a"]["node_guid"], lk["a"]["port_num"])
            b = (lk["b"]["node_guid"], lk["b"]["port_num"])
            if a[0] in self.nodes and b[0] in self.nodes:
                self.remote[a], self.remote[b] = b, a

    def name(self, guid: int) -> str:
        return '"' + {"Switch": "S", "CA": "H", "Router": "R"}.get(self.nodes[guid]["type"], "?") + f'-{guid:016x}"'

    def port(self, guid: int, num: int) -> dict:
        return self.ports.get((guid, num)) or {}

    def lid(self, guid: int, num: int) -> int:
        """The LID ibnetdiscover shows for an end: a switch's port 0 LID, else the port's base LID."""
        if self.nodes[guid]["type"] == "Switch":
            num = 0
        return self.port(guid, num).get("lid") or 0

    def ordered(self) -> List[dict]:
        rank = {"Switch": 0, "CA": 1, "Router": 2}
        return sorted(self.nodes.values(), key=lambda n: (rank[n["type"]], n["guid"]))


def _port_guid(node: dict, ix: _Index) -> int:
    p = ix.port(node["guid"], 0 if node["type"] == "Switch" else 1)
    return p.get("guid") or node["guid"]


def ibnetdiscover(view: dict, now: Optional[float] = None) -> str:
    ix = _Index(view)
    master = (view["sm"]["master"] or {}).get("guid")
    origin = next((p for p in view["ports"] if master and p["guid"] == master), None)
    out = ["#", f"# Topology file: generated on {time.ctime(now if now is not None else time.time())}", "#"]
    if origin:
        out.append(f"# Initiated from node {origin['node_guid']:016x} port {origin['guid']:016x}")
    for n in ix.ordered():
        g = n["guid"]
        out += ["", f"vendid=0x{n['vendor_id']:x}", f"devid=0x{n['device_id']:x}"]
        if n["system_image_guid"]:
            out.append(f"sysimgguid=0x{n['system_image_guid']:x}")
        desc = printable(n["description"])
        if n["type"] == "Switch":
            p0 = ix.port(g, 0)
            out.append(f"switchguid=0x{g:x}({_port_guid(n, ix):x})")
            out.append(
                f'Switch\t{n["num_ports"]} {ix.name(g)}\t\t# "{desc}" '
                f"{'enhanced' if n.get('enhanced_port0') else 'base'} port 0 lid {p0.get('lid') or 0} "
                f"lmc {p0.get('lmc') or 0}"
            )
        else:
            out.append(f"{'ca' if n['type'] == 'CA' else 'rt'}guid=0x{g:x}")
            out.append(f'{"Ca" if n["type"] == "CA" else "Rt"}\t{n["num_ports"]} {ix.name(g)}\t\t# "{desc}"')
        for num in range(1, n["num_ports"] + 1):
            if (g, num) not in ix.remote:
                continue
            rg, rnum = ix.remote[(g, num)]
            p, rnode = ix.port(g, num), ix.nodes[rg]
            cap = (ix.port(g, 0) if n["type"] == "Switch" else p).get("capability_mask")
            rate = _width(p.get("link_width_active")) + _speed(
                p.get("link_speed_active"), p.get("link_speed_ext_active"), cap
            )
            rguid = ix.port(rg, rnum).get("guid") or 0
            if n["type"] == "Switch":
                far = f"({rguid:x}) " if rnode["type"] != "Switch" else ""
                out.append(
                    f'[{num}]\t{ix.name(rg)}[{rnum}]{far}\t\t# "{printable(rnode["description"])}" '
                    f"lid {ix.lid(rg, rnum)} {rate}"
                )
            else:
                far = f" ({rguid:x}) " if rnode["type"] != "Switch" else ""
                out.append(
                    f"[{num}]({p.get('guid') or 0:x}) \t{ix.name(rg)}[{rnum}]{far}\t\t# lid {p.get('lid') or 0} "
                    f'lmc {p.get("lmc") or 0} "{printable(rnode["description"])}" lid {ix.lid(rg, rnum)} {rate}'
                )
    return "\n".join(out) + "\n"


def _dq(text) -> str:
    """A DOT quoted string; a newline becomes DOT's centred line break."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _node_id(guid: int) -> str:
    return f'"0x{guid:016x}"'


def dot(view: dict) -> str:
    """Graphviz: switches as boxes, CAs as ellipses, the master SM's node double-bordered; each link labelled
    with its active rate, red when it trained below what both ends enable (degraded), orange and dashed when
    only below what both support."""
    ix = _Index(view)
    master = (view["sm"]["master"] or {}).get("guid") or None
    sm_node = next((p["node_guid"] for p in view["ports"] if master and p["guid"] == master), None)
    if sm_node is None and view["sm"]["master_lid"]:
        sm_node = next((p["node_guid"] for p in view["ports"] if p["lid"] == view["sm"]["master_lid"]), None)
    out = ["graph fabric {", "  graph [rankdir=TB];", '  node [fontname="sans-serif"];']
    for n in ix.ordered():
        g = n["guid"]
        lines = [printable(n["description"]) or f"0x{g:016x}", f"0x{g:016x}"]
        lid = ix.lid(g, 1 if n["type"] != "Switch" else 0)
        if lid:
            lines.append(f"LID {lid}")
        label = "\n".join(lines)
        attrs = [f"label={_dq(label)}", "shape=box" if n["type"] == "Switch" else "shape=ellipse"]
        if g == sm_node:
            attrs += ["peripheries=2", 'xlabel="master SM"']
        out.append(f"  {_node_id(g)} [{', '.join(attrs)}];")
    for lk in view["links"]:
        a, b = lk["a"], lk["b"]
        if a["node_guid"] not in ix.nodes or b["node_guid"] not in ix.nodes:
            continue
        label = lk.get("active", "unknown rate")
        attrs = [f"label={_dq(label)}", f"taillabel={_dq(a['port_num'])}", f"headlabel={_dq(b['port_num'])}"]
        if lk.get("below_enabled"):
            attrs += ["color=red", "penwidth=2", f"tooltip={_dq('degraded: both ends enable ' + lk['best_enabled'])}"]
        elif lk.get("below_supported"):
            attrs += ["color=orange", "style=dashed", f"tooltip={_dq('below supported ' + lk['best_supported'])}"]
        ends = " -- ".join(_node_id(e["node_guid"]) for e in (a, b))
        out.append(f"  {ends} [{', '.join(attrs)}];")
    out.append("}")
    return "\n".join(out) + "\n"
