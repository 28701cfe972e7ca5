"""The subnet as its management traffic shows it: `fabric_view(path)` rebuilds nodes, ports, P_Key tables,
the master SM, links and traps from the SMPs of a native-IB capture (model.py says how).

JSON schema (`ibwire fabric FILE --format json`, also read by the audit).  GUIDs, LIDs and P_Keys are
integers; a value not seen in the capture is null.

    {
      "capture": str, "mads": int, "smps": int,
      "nodes": [{"guid": int, "type": "CA"|"Switch"|"Router"|null, "description": str,
                 "system_image_guid": int, "num_ports": int, "device_id": int, "vendor_id": int,
                 "enhanced_port0": bool|null}],        # switches: SwitchInfo.EnhancedPort0
      "ports": [{"guid": int|null,            # port GUID (a switch's ports share port 0's)
                 "node_guid": int, "port_num": int,
                 "lid": int|null, "lmc": int|null,     # switch ports 1-n report port 0's LID
                 "state": str|null, "master_sm_lid": int|null,
                 "partition_enforcement": {"inbound": int, "outbound": int}|null,
                 "violations": {"m_key": int, "p_key": int, "q_key": int}|null,
                 "pkeys": [int],              # non-zero entries in table order, bit 15 = full member
                 "pkey_table": [int],         # every entry read or written, index = position (0 = empty)
                 "pkeys_last": "read"|"written"|null, "pkeys_frame": int|null,
                 "link_width_active": int|null, "link_speed_active": int|null,   # PortInfo codes
                 "link_speed_ext_active": int|null, "capability_mask": int|null}],
      "sm": {"master": {"guid": int, "lid": int|null, "priority": int, "state": str, "actcount": int,
                        "sm_key": int, "frame": int}|null,   # the MASTER claim winning the election (sm.py)
             "rogues": [same objects as master],   # the other MASTER claims: they lose the election
             "master_lid": int|null,           # from PortInfo.MasterSMLID when no SMInfo was seen
             "seen": [same objects as master]},    # every SM's last SMInfo answer, by frame
      "links": [{"a": {"node_guid": int, "port_num": int}, "b": {...},
                 "active": str, "active_gbps": float, "best_supported": str, "best_supported_gbps": float,
                 "best_enabled": str, "best_enabled_gbps": float,
                 "below_supported": bool, "below_enabled": bool}],   # rates absent without PortInfo
      "traps": [{"frame": int, "time": float, "slid": int, "dlid": int, "generic": bool, "type": int,
                 "number": int|null, "issuer_lid": int, "details": {"trap.<field>": value}}]
    }
"""

from collections import Counter

from dissectors.numbers import PKEY_BASE
from ibwire.analyze.fabric.model import NODE_TYPES, PORT_STATES, FabricBuilder, build
from ibwire.analyze.fabric.sm import elect


def fabric_view(path: str) -> dict:
    """The JSON-ready view of the subnet in the capture at `path` (schema above)."""
    return view(build(path), path)


def view(b: FabricBuilder, path: str) -> dict:
    """The JSON-ready view (schema above) of what builder `b` gathered from the capture at `path`."""
    nodes = [
        {
            "guid": n.guid,
            "type": NODE_TYPES.get(n.type),
            "description": n.description,
            "system_image_guid": n.system_image_guid,
            "num_ports": n.num_ports,
            "device_id": n.device_id,
            "vendor_id": n.vendor_id,
            "enhanced_port0": n.enhanced_port0,
        }
        for n in sorted(b.nodes.values(), key=lambda n: n.guid)
    ]
    ports = []
    for (guid, num), p in sorted(b.ports.items()):
        pi = p.portinfo
        table = [k for blk in sorted(p.pkey_blocks) for k in p.pkey_blocks[blk]] if p.pkey_blocks else []
        if p.pkey_blocks and sorted(p.pkey_blocks) != list(range(len(p.pkey_blocks))):
            table = []
            for blk in range(max(p.pkey_blocks) + 1):
                table += p.pkey_blocks.get(blk, [0] * 32)
        ports.append(
            {
                "guid": p.guid,
                "node_guid": guid,
                "port_num": num,
                "lid": p.lid,
                "lmc": pi.get("lmc") if pi else None,
                "state": PORT_STATES.get(pi["portstate"], str(pi["portstate"])) if "portstate" in pi else None,
                "master_sm_lid": pi.get("mastersmlid") if pi else None,
                "partition_enforcement": {
                    "inbound": pi.get("partitionenforcementinbound", 0),
                    "outbound": pi.get("partitionenforcementoutbound", 0),
                }
                if pi
                else None,
                "violations": {
                    "m_key": pi.get("m_keyviolations", 0),
                    "p_key": pi.get("p_keyviolations", 0),
                    "q_key": pi.get("q_keyviolations", 0),
                }
                if pi
                else None,
                "pkeys": [k for k in table if k & PKEY_BASE],
                "pkey_table": table,
                "pkeys_last": p.pkeys_how or None,
                "pkeys_frame": p.pkeys_frame or None,
                "link_width_active": pi.get("linkwidthactive"),
                "link_speed_active": pi.get("linkspeedactive"),
                "link_speed_ext_active": pi.get("linkspeedextactive"),
                "capability_mask": pi.get("capabilitymask"),
            }
        )
    seen = sorted(b.sminfo.values(), key=lambda s: s["frame"])
    master, rogues = elect(seen)
    sm_lids = Counter(p["master_sm_lid"] for p in ports if p["master_sm_lid"])
    return {
        "capture": path,
        "mads": b.mads,
        "smps": b.smps,
        "nodes": nodes,
        "ports": ports,
        "sm": {
            "master": master,
            "rogues": rogues,
            "master_lid": sm_lids.most_common(1)[0][0] if sm_lids else None,
            "seen": seen,
        },
        "links": b.links(),
        "traps": b.traps,
    }
