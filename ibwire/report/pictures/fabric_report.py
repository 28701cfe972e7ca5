"""`ibwire fabric --report`: the subnet a capture's SMPs show, drawn (topology.py) and tabulated."""

import os

from ibwire.report.pictures.page import page, write_html
from ibwire.report.pictures.svg import esc
from ibwire.report.pictures.topology import topology_svg
from ibwire.words import plural


def _name(nodes: dict, guid: int) -> str:
    n = nodes.get(guid)
    return n["description"] if n and n["description"] else f"{guid:#018x}"


def render(view: dict) -> str:
    nodes = {n["guid"]: n for n in view["nodes"]}
    sm = view["sm"]
    if sm["master"]:
        m = sm["master"]
        sm_text = (
            f"master SM: port {m['guid']:#018x}, LID {m['lid']}, priority {m['priority']} "
            f"(SMInfo in frame {m['frame']})"
        )
    elif sm["master_lid"]:
        sm_text = f"master SM at LID {sm['master_lid']} (PortInfo.MasterSMLID; no SMInfo seen)"
    else:
        sm_text = "no master SM seen"
    for r in sm.get("rogues", ()):
        sm_text += (
            f"; rogue SM: port {r['guid']:#018x}, LID {r['lid']}, priority {r['priority']} claims MASTER "
            f"(SMInfo in frame {r['frame']}) but is outranked"
        )
    body = [
        f"<p>{esc(view['capture'])}: {plural(view['mads'], 'MAD')}, {plural(view['smps'], 'SMP')}; "
        f"{plural(len(view['nodes']), 'node')}, {plural(len(view['links']), 'link')}; "
        f"<span id='sm'>{esc(sm_text)}</span>.</p>",
        "<h2>Topology</h2><p class='note'>Red: trained below what both ends enable (degraded). Orange, dashed: "
        "below what both ends support. Ringed: the master SM's node; a rogue SM (claims MASTER, outranked) is "
        "badged red.</p>",
        topology_svg(view),
        "<h2>Links</h2><table id='links'><tr><th>end A</th><th>end B</th><th>active</th><th>both support</th>"
        "<th>both enable</th><th>state</th></tr>",
    ]
    for lk in view["links"]:
        a, b = lk["a"], lk["b"]
        state = "degraded" if lk.get("below_enabled") else ("below supported" if lk.get("below_supported") else "")
        body.append(
            f"<tr class='{state.replace(' ', '-')}'><td>{esc(_name(nodes, a['node_guid']))} port {a['port_num']}"
            f"</td><td>{esc(_name(nodes, b['node_guid']))} port {b['port_num']}</td>"
            f"<td>{esc(lk.get('active', 'no PortInfo'))}</td><td>{esc(lk.get('best_supported', ''))}</td>"
            f"<td>{esc(lk.get('best_enabled', ''))}</td><td>{state}</td></tr>"
        )
    body.append(
        "</table><h2>Nodes</h2><table id='nodes'><tr><th>type</th><th>GUID</th><th>description</th>"
        "<th>ports</th><th>LIDs</th></tr>"
    )
    for n in view["nodes"]:
        lids = sorted({p["lid"] for p in view["ports"] if p["node_guid"] == n["guid"] and p["lid"]})
        body.append(
            f"<tr><td>{esc(n['type'] or '?')}</td><td><code>{n['guid']:#018x}</code></td>"
            f"<td>{esc(n['description'])}</td><td class='n'>{n['num_ports']}</td>"
            f"<td>{', '.join(map(str, lids))}</td></tr>"
        )
    body.append("</table>")
    if view["traps"]:
        body.append(
            "<h2>Traps</h2><table id='traps'><tr><th>frame</th><th>trap</th><th>issuer LID</th></tr>"
            + "".join(
                f"<tr><td>{t['frame']}</td><td>{t['number']}</td><td>{t['issuer_lid']}</td></tr>" for t in view["traps"]
            )
            + "</table>"
        )
    return page(f"ibwire fabric: {os.path.basename(view['capture'])}", "".join(body), "fabric")


def write_report(capture: str, out: str, view: dict) -> None:
    write_html(out, render(view), inputs=(capture,))
