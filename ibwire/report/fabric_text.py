"""Plain-text rendering of `fabric_view()` for people: one section per kind of fact.  Text read from the
capture (node descriptions, trap details, the file name) is shown with its control characters escaped."""

from ibwire.report.escape import printable
from ibwire.words import plural


def _g(v) -> str:
    return "-" if v is None else f"0x{v:016x}"


def _lid(v) -> str:
    return "-" if v is None else str(v)


def _pk(k: int) -> str:
    return f"0x{k:04x}({'full' if k & 0x8000 else 'limited'})"


def render(view: dict) -> str:
    lines = [f"{printable(view['capture'])}: {plural(view['mads'], 'MAD')}, {plural(view['smps'], 'SMP')}"]
    names = {n["guid"]: printable(n["description"]) or _g(n["guid"]) for n in view["nodes"]}
    lines.append(f"\nNodes ({len(view['nodes'])})")
    for n in view["nodes"]:
        lines.append(
            f'  {n["type"] or "?":6} {_g(n["guid"])}  ports {n["num_ports"]:<3} "{printable(n["description"])}"'
        )
    lines.append("\nPorts")
    for p in view["ports"]:
        if p["state"] is None and not p["pkeys"]:
            continue
        lid = "-" if p["lid"] is None else str(p["lid"])
        pk = " ".join(_pk(k) for k in p["pkeys"]) or "-"
        how = f" [{p['pkeys_last']} in frame {p['pkeys_frame']}]" if p["pkeys_last"] else ""
        lines.append(
            f"  {names.get(p['node_guid'], _g(p['node_guid']))} port {p['port_num']:<2} "
            f"guid {_g(p['guid'])} lid {lid:<5} {p['state'] or '?':7} P_Keys {pk}{how}"
        )
    sm = view["sm"]
    lines.append("\nSubnet manager")
    if sm["master"]:
        m = sm["master"]
        lines.append(
            f"  master {_g(m['guid'])} lid {_lid(m['lid'])} priority {m['priority']} "
            f"activity {m['actcount']} (SMInfo, frame {m['frame']})"
        )
    elif sm["master_lid"]:
        lines.append(f"  master at lid {sm['master_lid']} (PortInfo.MasterSMLID; no SMInfo seen)")
    else:
        lines.append("  none seen")
    rogues = {s["guid"] for s in sm.get("rogues", ())}
    for s in sm["seen"]:
        if s is sm["master"]:
            continue
        what = "ROGUE" if s["guid"] in rogues else s["state"].lower()
        why = "; claims MASTER, outranked by the master" if s["guid"] in rogues else ""
        lines.append(
            f"  {what} {_g(s['guid'])} lid {_lid(s['lid'])} priority {s['priority']} (SMInfo, frame {s['frame']}{why})"
        )
    lines.append(f"\nLinks ({len(view['links'])})")
    for lk in view["links"]:
        a, b = lk["a"], lk["b"]
        ends = (
            f"{names.get(a['node_guid'], _g(a['node_guid']))}/{a['port_num']} <-> "
            f"{names.get(b['node_guid'], _g(b['node_guid']))}/{b['port_num']}"
        )
        if "active" not in lk:
            lines.append(f"  {ends}  (no PortInfo)")
            continue
        flag = ""
        if lk["below_enabled"]:
            flag = f"  DEGRADED: both ends enable {lk['best_enabled']}"
        elif lk["below_supported"]:
            flag = f"  below supported {lk['best_supported']} (enabled: {lk['best_enabled']})"
        lines.append(f"  {ends}  active {lk['active']}{flag}")
    lines.append(f"\nTraps ({len(view['traps'])})")
    for t in view["traps"]:
        num = t["number"] if t["generic"] else f"vendor 0x{t['number'] or 0:x}"
        det = " ".join(f"{k[5:]}={printable(v)}" for k, v in t["details"].items())
        lines.append(f"  frame {t['frame']}: trap {num} from lid {t['issuer_lid']} {det}".rstrip())
    return "\n".join(lines) + "\n"
