"""What `ibwire devices` shows: every RDMA device and port, SR-IOV VFs, eswitch, firmware, backends."""

from typing import List

from ibwire.capture import hostcmds, sysfs
from ibwire.capture.select import BACKENDS, why_not


def inventory(root=None) -> dict:
    devs = sysfs.list_devices(root)
    inv = {"kernel_rdma": sysfs.kernel_has_rdma(root), "cap_net_raw": hostcmds.has_cap_net_raw(), "devices": []}
    for d in devs:
        netdev = next((p.netdev for p in d.ports if p.netdev), d.netdevs[0] if d.netdevs else None)
        vfinfo = {}
        for link in hostcmds.ip_link(netdev) if netdev else []:
            for v in link.get("vfinfo_list", []):
                vfinfo[v.get("vf")] = v
        eswitch = hostcmds.eswitch_mode(d.pci) if d.pci and d.vfs else None
        reps = hostcmds.representors(d.pci) if eswitch == "switchdev" else {}
        entry = {
            "name": d.name,
            "pci": d.pci,
            "node_guid": d.node_guid,
            "fw_ver": d.fw_ver,
            "is_vf": d.is_vf,
            "netdevs": d.netdevs,
            "sriov_numvfs": d.numvfs,
            "sriov_totalvfs": d.totalvfs,
            "eswitch": eswitch,
            "firmware": hostcmds.mstconfig_query(d.pci) if d.pci and hostcmds.which("mstconfig") else None,
            "ports": [],
            "vfs": [],
        }
        for p in d.ports:
            entry["ports"].append(
                {
                    "port": p.num,
                    "link_layer": p.link_layer,
                    "state": p.state,
                    "phys_state": p.phys_state,
                    "rate": p.rate,
                    "lid": p.lid,
                    "sm_lid": p.sm_lid,
                    "gids": p.gids,
                    "netdev": p.netdev,
                    "backends": {b: why_not(b, p.link_layer, eswitch, True) or "ok" for b in BACKENDS},
                }
            )
        for v in d.vfs:
            info = vfinfo.get(v.index, {})
            entry["vfs"].append(
                {
                    "vf": v.index,
                    "pci": v.bdf,
                    "driver": v.driver,
                    "bound_on_host": v.bound_on_host,
                    "ibdevs": v.ibdevs,
                    "netdevs": v.netdevs,
                    "mac": info.get("address"),
                    "vlan": [x.get("vlan") for x in info.get("vlan_list", []) if x.get("vlan")] or info.get("vlan"),
                    "node_guid": info.get("node guid"),
                    "port_guid": info.get("port guid"),
                    "representor": reps.get(v.index),
                }
            )
        inv["devices"].append(entry)
    if not devs:
        inv["backends"] = {b: why_not(b, None, None, False) or "ok" for b in ("netdev", "tc-mirror", "ibsim")}
    return inv


def render(inv: dict) -> str:
    if not inv["devices"]:
        why = (
            "this kernel has no RDMA support"
            if not inv["kernel_rdma"]
            else "the kernel has RDMA support but no RDMA device is present"
        )
        ok = [b for b, r in inv.get("backends", {}).items() if r == "ok"]
        return (
            f"No RDMA devices: {why}, so only kernel interfaces can be captured "
            f"(backends that can run here: {', '.join(ok) or 'none'}; `ibwire lab up` builds a test lab)."
        )
    out: List[str] = []
    if not inv["cap_net_raw"]:
        out.append("note: this process lacks CAP_NET_RAW (CapEff bit 13); raw captures need root")
    for d in inv["devices"]:
        head = f"{d['name']}  pci {d['pci'] or '?'}  fw {d['fw_ver'] or '?'}  node GUID {d['node_guid'] or '?'}"
        if d["is_vf"]:
            head += "  (a VF bound on this host)"
        out.append(head)
        if d["sriov_numvfs"] is not None:
            out.append(
                f"  SR-IOV: {d['sriov_numvfs']} of {d['sriov_totalvfs']} VFs enabled"
                + (f", eswitch {d['eswitch']}" if d["eswitch"] else "")
            )
        if d["firmware"]:
            out.append("  firmware: " + ", ".join(f"{k}={v}" for k, v in d["firmware"].items()))
        for p in d["ports"]:
            ids = f"LID {p['lid']:#x}" if p["lid"] else ""
            out.append(
                f"  port {p['port']}: {p['link_layer']}, {p['state']} ({p['phys_state']}), {p['rate']}"
                + (f", {ids}" if ids else "")
                + (f", netdev {p['netdev']}" if p["netdev"] else "")
            )
            for g in p["gids"][:4]:
                out.append(f"    GID {g}")
            for b, why in p["backends"].items():
                out.append(f"    backend {b:<10} {'can run' if why == 'ok' else 'cannot run: ' + why}")
        for v in d["vfs"]:
            ident = v["mac"] or ""
            if v["port_guid"]:
                ident = f"node GUID {v['node_guid']}, port GUID {v['port_guid']}"
            if v["vlan"]:
                ident += f", VLAN {v['vlan']}"
            where = (
                "bound on host (" + ", ".join(v["ibdevs"] + v["netdevs"]) + ")"
                if v["bound_on_host"]
                else f"not bound on host (driver {v['driver'] or 'none'}: passed to a VM or unbound)"
            )
            out.append(
                f"  VF {v['vf']}: {v['pci']}  {ident}  {where}"
                + (f", representor {v['representor']}" if v["representor"] else "")
            )
    return "\n".join(out)
