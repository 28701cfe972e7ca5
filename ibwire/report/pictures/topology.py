"""The subnet of a `fabric_view()` drawn as layered SVG: CAs at the bottom, the switches they hang off above
them, further switch tiers on top; each link labelled with its active width and speed; degraded links
(below what both ends enable) red, links below what both ends support orange and dashed; the master SM's
node ringed and badged, a rogue SM's (a MASTER claim losing the election, analyze/fabric/sm.py) badged red.
Optional colours per port GUID (tenants in the audit report).  A subnet of more than MAX_CAS CAs draws the
CAs cabled to one switch only as one box per switch ("24 CAs"), its link red or orange when any of theirs
is; the tables beside the picture keep every link."""

from collections import Counter, defaultdict
from typing import Dict, Optional, Tuple

from ibwire.report.pictures.svg import esc

BOX_W, BOX_H, GAP, ROW = 136, 44, 22, 120
MAX_CAS = 48
DASHED = "stroke-dasharray='4 2' "


def _layers(nodes: dict, adj: dict) -> Dict[int, int]:
    """Layer of each node: 0 for CAs/routers, 1 for switches next to one (or with no CA at all), then +1 per hop."""
    level = {g: 0 for g, n in nodes.items() if n["type"] != "Switch"}
    frontier = [
        g
        for g, n in nodes.items()
        if n["type"] == "Switch" and (any(nodes[o]["type"] != "Switch" for o in adj[g]) or not adj[g])
    ]
    for g in frontier:
        level[g] = 1
    while frontier:
        nxt = []
        for g in frontier:
            for o in adj[g]:
                if o not in level:
                    level[o] = level[g] + 1
                    nxt.append(o)
        frontier = nxt
    for g in nodes:
        level.setdefault(g, 1)
    return level


def _collapse(nodes: dict, links: list, tag) -> Tuple[dict, list]:
    """Nodes and links with the CAs cabled to one switch only replaced by one group node per switch
    (keyed by the negative switch GUID), whose link to the switch sums up theirs."""
    far = defaultdict(set)
    for lk in links:
        a, b = lk["a"]["node_guid"], lk["b"]["node_guid"]
        far[a].add(b)
        far[b].add(a)
    members = defaultdict(list)
    for g, n in nodes.items():
        if n["type"] != "Switch" and len(far[g]) == 1 and nodes[next(iter(far[g]))]["type"] == "Switch":
            members[next(iter(far[g]))].append(g)
    gone = {g for ms in members.values() for g in ms}
    out_nodes = {g: n for g, n in nodes.items() if g not in gone}
    out_links = [lk for lk in links if lk["a"]["node_guid"] not in gone and lk["b"]["node_guid"] not in gone]
    for sw, ms in members.items():
        tags = Counter(tag(g)[0] for g in ms)
        label = tags.most_common(1)[0][0] if len(tags) == 1 else None
        out_nodes[-sw] = {
            "guid": -sw,
            "type": "group",
            "description": f"{len(ms)} CAs",
            "members": ms,
            "tag": label,
            "tags": tags,
        }
        theirs = [lk for lk in links if {lk["a"]["node_guid"], lk["b"]["node_guid"]} & set(ms)]
        rates = Counter(lk.get("active", "") for lk in theirs)
        out_links.append(
            {
                "a": {"node_guid": sw, "port_num": ""},
                "b": {"node_guid": -sw, "port_num": ""},
                "active": ", ".join(f"{n}× {r}" if n > 1 else r for r, n in rates.most_common()),
                "below_enabled": any(lk.get("below_enabled") for lk in theirs),
                "below_supported": any(lk.get("below_supported") for lk in theirs),
                "count": len(theirs),
            }
        )
    return out_nodes, out_links


def _gid(g: int) -> str:
    return f"{g:#x}" if g >= 0 else f"group-{-g:#x}"


def _owners(ports: dict, colours: Optional[Dict[int, Tuple[str, str, str]]]) -> defaultdict:
    """CA node GUID -> (tag, fill, name) of the first of its ports `colours` names; grey and untagged otherwise."""
    owner = defaultdict(lambda: (None, "#eeeeee", ""))
    for (ng, _), p in ports.items():
        if colours and p.get("guid") in colours and ng not in owner:
            owner[ng] = colours[p["guid"]]
    return owner


def _place(nodes: dict, links: list) -> Tuple[dict, float, float]:
    """Top-left corner of each node's box (tiers from `_layers`, each row centred) and the picture's size."""
    adj = defaultdict(set)
    for lk in links:
        a, b = lk["a"]["node_guid"], lk["b"]["node_guid"]
        adj[a].add(b)
        adj[b].add(a)
    level = _layers(nodes, adj)
    top = max(level.values())
    rows = defaultdict(list)
    for g, lv in level.items():
        rows[lv].append(g)
    pos: Dict[int, float] = {}
    for lv in range(top, -1, -1):  # top tier by GUID, lower tiers under the middle of their neighbours above
        row = rows.get(lv, [])
        key = {
            g: (
                sum(pos[o] for o in adj[g] if o in pos) / max(1, sum(1 for o in adj[g] if o in pos))
                if any(o in pos for o in adj[g])
                else float("inf"),
                g,
            )
            for g in row
        }
        row.sort(key=lambda g: key[g])
        for i, g in enumerate(row):
            pos[g] = i
        rows[lv] = row
    widest = max(len(r) for r in rows.values())
    width = max(widest * (BOX_W + GAP) + 2 * GAP, 480)
    height = 40 + top * ROW + BOX_H + 16
    xy = {}
    for lv, row in rows.items():
        span = len(row) * (BOX_W + GAP) - GAP
        x0 = (width - span) / 2
        for i, g in enumerate(row):
            xy[g] = (x0 + i * (BOX_W + GAP), 40 + (top - lv) * ROW)
    return xy, width, height


def _sm_nodes(view: dict, nodes: dict) -> Tuple[Optional[int], set]:
    """The node drawn as the master SM's (found by port GUID, else by master LID; a group box when the node is
    inside one) and the nodes of rogue SMs (with the group boxes holding one)."""
    master = (view["sm"]["master"] or {}).get("guid")
    sm_node = next((p["node_guid"] for p in view["ports"] if master and p["guid"] == master), None)
    if sm_node is None and view["sm"]["master_lid"]:
        sm_node = next((p["node_guid"] for p in view["ports"] if p["lid"] == view["sm"]["master_lid"]), None)
    if sm_node is not None and sm_node not in nodes:  # inside a group box
        sm_node = next((g for g, n in nodes.items() if sm_node in n.get("members", ())), None)
    rogue_guids = {s["guid"] for s in view["sm"].get("rogues", ())}
    rogue_nodes = {p["node_guid"] for p in view["ports"] if p["guid"] in rogue_guids}
    rogue_nodes |= {g for g, n in nodes.items() if rogue_nodes & set(n.get("members", ()))}
    return sm_node, rogue_nodes


def _link_svg(lk: dict, nodes: dict, xy: dict) -> str:
    """One link: a line from the lower box's top to the upper box's bottom (side to side within a tier),
    coloured by its state, with its rate and the port numbers at both ends."""
    a, b = lk["a"], lk["b"]
    (xa, ya), (xb, yb) = xy[a["node_guid"]], xy[b["node_guid"]]
    if ya > yb:
        (xa, ya), (xb, yb), a, b = (xb, yb), (xa, ya), b, a
    x1, y1, x2, y2 = xa + BOX_W / 2, ya + BOX_H, xb + BOX_W / 2, yb
    if ya == yb:
        y1, y2 = ya + BOX_H / 2, yb + BOX_H / 2
    cls, colour, dash = "link", "#555", ""
    if lk.get("below_enabled"):
        cls, colour = "link degraded", "#d62728"
    elif lk.get("below_supported"):
        cls, colour, dash = "link below-supported", "#ff7f0e", " stroke-dasharray='6 3'"
    rate = lk.get("active", "").split(" (")[0] if "count" not in lk else f"{lk['count']} links"
    tip = (
        f"{nodes[a['node_guid']]['description']} port {a['port_num']} ↔ {nodes[b['node_guid']]['description']} "
        f"port {b['port_num']}: active {lk.get('active', 'unknown')}"
    )
    if "best_supported" in lk:
        tip += f"; both ends support {lk['best_supported']}, enable {lk['best_enabled']}"
    return (
        f"<g class='{cls}' data-a='{_gid(a['node_guid'])}/{a['port_num']}' data-b='{_gid(b['node_guid'])}/"
        f"{b['port_num']}' data-active='{esc(lk.get('active', ''))}'><title>{esc(tip)}</title>"
        f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='{colour}' stroke-width='2'{dash}/>"
        f"<text class='rate' x='{(x1 + x2) / 2 + 4}' y='{(y1 + y2) / 2}' fill='{colour}'>{esc(rate)}</text>"
        f"<text class='tick port' x='{x1 + (x2 - x1) * 0.12 + 4}' y='{y1 + (y2 - y1) * 0.12 + 4}'>"
        f"{a['port_num']}</text><text class='tick port' x='{x2 - (x2 - x1) * 0.12 + 4}' "
        f"y='{y2 - (y2 - y1) * 0.12}'>{b['port_num']}</text></g>"
    )


def _look(g: int, n: dict, owner: defaultdict) -> Tuple[Optional[str], str, str]:
    """A node's tenant label, fill and name: switches blue, a group its tenant's fill when all share one
    ("mixed" when its CAs have several tags or some none), a CA its owner's (whose name stands in for an
    empty description)."""
    if n["type"] == "Switch":
        return None, "#dbe9f6", n["description"]
    if n["type"] == "group":
        label = n["tag"] or ("mixed" if len(n["tags"]) > 1 or None not in n["tags"] else None)
        return label, owner[n["members"][0]][1] if n["tag"] else "#eeeeee", n["description"]
    label, fill, other = owner[g]
    return label, fill, n["description"] or other


def _node_title(g: int, n: dict, lid, label: Optional[str], owner: defaultdict, nodes_all: dict) -> str:
    """A node's tooltip: type, GUID, LID and tenant; for a group box its switch and (the first 64 of) its CAs."""
    if n["type"] == "group":
        return (
            f"{n['description']} on switch {-g:#018x}: "
            + ", ".join(
                (nodes_all[m]["description"] or f"{m:#x}") + (f" ({owner[m][0]})" if owner[m][0] else "")
                for m in n["members"][:64]
            )
            + (" …" if len(n["members"]) > 64 else "")
        )
    return f"{n['type']} {g:#018x}{f' LID {lid}' if lid else ''}{f' tenant {label}' if label else ''}"


def _node_svg(g: int, n: dict, at: Tuple[float, float], lid, look: tuple, title: str, master: bool, rogue: bool) -> str:
    """One node's box at `at` (rounded for CAs, dashed for a group), its name and a line of type, LID and
    tenant; the master SM's ringed, it and a rogue SM's badged."""
    (x, y), (label, fill, name) = at, look
    cls = "node " + n["type"].lower() + (" master-sm" if master else "") + (" rogue-sm" if rogue else "")
    facts = (n["type"] if not label else "", f"LID {lid}" if lid else "", label)
    out = (
        f"<g class='{cls}' data-guid='{_gid(g)}' data-tenant='{esc(label or '')}'>"
        f"<title>{esc(title)}</title>"
        f"<rect x='{x}' y='{y}' width='{BOX_W}' height='{BOX_H}' rx='{3 if n['type'] == 'Switch' else 12}' "
        f"{DASHED if n['type'] == 'group' else ''}"
        f"fill='{fill}' stroke='{'#b8860b' if master else '#666'}' "
        f"stroke-width='{3 if master else 1}'/>"
        f"<text x='{x + BOX_W / 2}' y='{y + 18}' text-anchor='middle' font-weight='bold'>"
        f"{esc((name or f'{g:#x}')[:20])}</text>"
        f"<text class='tick' x='{x + BOX_W / 2}' y='{y + 34}' text-anchor='middle'>"
        f"{esc(' · '.join(f for f in facts if f and f != 'group'))}</text>"
    )
    badge = "master SM" if master else "rogue SM" if rogue else ""
    if badge:
        out += (
            f"<text class='sm-badge' x='{x + BOX_W - 4}' y='{y - 4}' text-anchor='end' "
            f"fill='{'#b8860b' if master else '#d62728'}' font-weight='bold'>{badge}</text>"
        )
    return out + "</g>"


def topology_svg(view: dict, colours: Optional[Dict[int, Tuple[str, str, str]]] = None) -> str:
    """SVG of the subnet; `colours` maps a port GUID to (group label, fill, name) for the CA owning that port
    (the name stands in for an empty node description)."""
    nodes = nodes_all = {n["guid"]: n for n in view["nodes"] if n["type"]}
    if not nodes:
        return "<p class='note'>No NodeInfo in the capture: no topology to draw.</p>"
    ports = {(p["node_guid"], p["port_num"]): p for p in view["ports"]}
    owner = _owners(ports, colours)
    links = [lk for lk in view["links"] if lk["a"]["node_guid"] in nodes and lk["b"]["node_guid"] in nodes]
    if sum(1 for n in nodes.values() if n["type"] != "Switch") > MAX_CAS:
        nodes, links = _collapse(nodes, links, lambda g: owner[g])
    xy, width, height = _place(nodes, links)
    sm_node, rogue_nodes = _sm_nodes(view, nodes)
    out = [
        f"<svg class='chart topology' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' data-nodes='{len(nodes)}' data-links='{len(links)}' "
        f"data-degraded='{sum(1 for lk in links if lk.get('below_enabled'))}' "
        f"data-below-supported='{sum(1 for lk in links if lk.get('below_supported'))}'>"
    ]
    out += [_link_svg(lk, nodes, xy) for lk in links]
    for g, n in nodes.items():
        lid = ports.get((g, 0 if n["type"] == "Switch" else 1), {}).get("lid")
        look = _look(g, n, owner)
        out.append(
            _node_svg(
                g,
                n,
                xy[g],
                lid,
                look,
                _node_title(g, n, lid, look[0], owner, nodes_all),
                g == sm_node,
                g in rogue_nodes,
            )
        )
    out.append("</svg>")
    return "".join(out)
