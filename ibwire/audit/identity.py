"""Packet ends as the wire shows them, tied to port GUIDs and tenants.

An IB end is a port by the interface ID of its GID (IBA 4.1.1), else by a LID only one port holds
(NodeInfo and PortInfo(Set) over the same directed route in the capture, or --state); a RoCE end is its
tenant's by MAC/IP/VLAN, or by MAC/IP alone when the frame carries a foreign VLAN (how a crossing looks).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from ibwire.audit.fields import as_int, gid_text, ip_text
from ibwire.audit.policy import Port
from ibwire.audit.state import FabricState, gid_port_guid, vf_port_guid
from ibwire.audit.tenants import Endpoint, Tenants

NO_TENANT = "(no tenant)"


@dataclass
class Side:
    """One end of a packet as the wire shows it."""

    kind: str  # ib | roce
    lid: Optional[int] = None
    gid: Optional[str] = None
    mac: Optional[str] = None
    ip: Optional[str] = None
    vlan: Optional[int] = None

    def key(self) -> tuple:
        return (self.kind, self.lid, self.gid, self.mac, self.ip, self.vlan)

    def speaker(self) -> tuple:
        """The sending port whatever it addresses: its LID alone (a GRH is added for multicast), or RoCE key."""
        return ("ib", self.lid) if self.kind == "ib" and self.lid is not None else self.key()

    def text(self) -> str:
        if self.kind == "ib":
            return f"LID {self.lid}" + (f" GID {self.gid}" if self.gid else "")
        return " ".join(x for x in (self.ip, self.mac, f"vlan {self.vlan}" if self.vlan is not None else "") if x)


def sides(flat: dict) -> tuple:
    """(source, destination) of a packet: LRH LIDs and GRH GIDs on IB, MAC/IP/VLAN on RoCE."""
    vlan = as_int(flat.get("vlan.id"))
    if "lrh.slid" in flat:
        return (
            Side("ib", as_int(flat["lrh.slid"]), gid_text(flat.get("grh.sgid"))),
            Side("ib", as_int(flat["lrh.dlid"]), gid_text(flat.get("grh.dgid"))),
        )
    sip = flat.get("ip.src") or flat.get("ipv6.src") or flat.get("grh.sgid")
    dip = flat.get("ip.dst") or flat.get("ipv6.dst") or flat.get("grh.dgid")
    return (
        Side("roce", mac=flat.get("eth.src"), ip=ip_text(sip), vlan=vlan),
        Side("roce", mac=flat.get("eth.dst"), ip=ip_text(dip), vlan=vlan),
    )


@dataclass
class Resolved:
    """A packet end tied (or not) to a port and a tenant, and how."""

    guid: Optional[int]
    tenant: str
    how: str


def policy_port(ports: FabricState, guid: int) -> Port:
    """The port as partitions.conf selects it: node type, and whether it is the master SM's."""
    ps = ports.ports.get(guid)
    sm = ports.master_sm
    return Port(guid, ps.node_type if ps else "ca", guid == sm if sm else False)


def map_endpoints(tenants: Tenants, ports: FabricState) -> list:
    """Fill in VF port GUIDs from sysfs; [(endpoint, how its GUID, LID and GID are linked)]."""
    out = []
    for ep in tenants.endpoints:
        notes = []
        if ep.pf is not None and ep.port_guid is None:
            ep.port_guid = vf_port_guid(ep.pf, ep.vf)
            notes.append(
                f"{ep.pf} vf {ep.vf} -> port GUID from sysfs"
                if ep.port_guid
                else f"{ep.pf} vf {ep.vf}: no port GUID in sysfs (unmapped)"
            )
        if ep.port_guid is not None:
            ps = ports.ports.get(ep.port_guid)
            if ps and ps.lid:
                notes.append(f"GUID 0x{ep.port_guid:016x} -> LID {ps.lid} from {ps.source}")
            elif ep.lid is None:
                notes.append(f"GUID 0x{ep.port_guid:016x}: no LID known (matched by GID only)")
        out.append((ep, "; ".join(notes) or "declared directly"))
    return out


class Identities:
    """Who is behind a packet end, a LID or a port GUID, against one merged view of the fabric."""

    def __init__(self, tenants: Tenants, ports: FabricState):
        self.tenants = tenants
        self.ports = ports
        self._resolved: dict = {}
        self._lids: dict = {}  # LID -> ports holding it
        for ps in ports.ports.values():
            self._lids.setdefault(ps.lid, []).append(ps)
        self._ib: dict = {}  # ("guid" | "gid" | "lid", value) -> IB endpoints
        self._rank = {id(ep): i for i, ep in enumerate(tenants.endpoints)}
        self._first: dict = {}  # port GUID -> its first endpoint (Tenants.endpoint_of)
        self._macs: dict = {}  # RoCE endpoints by MAC; those without one are tried for every end
        self._no_mac, self._gid_ips = [], {}
        for ep in tenants.endpoints:
            if ep.port_guid is not None:
                self._first.setdefault(ep.port_guid, ep)
            if ep.is_roce:
                (self._macs.setdefault(ep.mac, []) if ep.mac is not None else self._no_mac).append(ep)
            elif ep.gid is not None:
                self._gid_ips.setdefault(ip_text(ep.gid), []).append(ep)
            if not ep.is_roce:
                for k in (("guid", ep.port_guid), ("gid", ep.gid), ("lid", ep.lid)):
                    if k[1] is not None:
                        self._ib.setdefault(k, []).append(ep)

    def owners(self, lid) -> list:
        """The ports holding this LID (FabricState.by_lid, from an index: the audit asks once per packet end)."""
        return self._lids.get(lid, [])

    def _ib_candidates(self, side: Side, guid: Optional[int]) -> list:
        """The IB endpoints, in declaration order, that the tests of `_resolve` can accept for this end:
        the same port GUID, GID or declared LID, or those of the port that alone holds the end's LID."""
        found = self._ib.get(("guid", guid), []) if guid is not None else []
        if side.gid:
            found = found + self._ib.get(("gid", side.gid), [])
        elif side.lid is not None:
            found = found + self._ib.get(("lid", side.lid), [])
        owners = self.owners(side.lid)
        if guid is None and side.lid is not None and len(owners) == 1:
            found = found + self._ib.get(("guid", owners[0].guid), [])
        return sorted({id(ep): ep for ep in found}.values(), key=lambda ep: self._rank[id(ep)])

    def _roce_candidates(self, side: Side) -> list:
        """The endpoints, in declaration order, `_roce_match` can accept for this RoCE end: those with its MAC
        or none, and IB endpoints whose GID is its IP."""
        found = self._macs.get((side.mac or "").lower(), []) + self._no_mac + self._gid_ips.get(side.ip, [])
        return sorted(found, key=lambda ep: self._rank[id(ep)])

    def resolve(self, side: Side) -> Resolved:
        r = self._resolved.get(side.key())
        if r is None:
            r = self._resolved[side.key()] = self._resolve(side)
        return r

    def port_at(self, lid) -> Optional[int]:
        """GUID of the one port holding this LID; None when no port or several do."""
        owners = self.owners(lid)
        return owners[0].guid if len(owners) == 1 else None

    def node(self, guid: int) -> Port:
        return policy_port(self.ports, guid)

    def who(self, guid: int) -> str:
        ps = self.ports.ports.get(guid)
        ep = self._first.get(guid)
        return (
            f"port 0x{guid:016x}"
            + (f" LID {ps.lid}" if ps and ps.lid else "")
            + (f" ({ep.label} of tenant {ep.tenant})" if ep else "")
        )

    def _resolve(self, side: Side) -> Resolved:
        if side.kind != "ib":
            eps = self._roce_candidates(side)
            for ep in eps:
                if _roce_match(ep, side, with_vlan=True):
                    return Resolved(None, ep.tenant, "RoCE MAC/IP/VLAN")
            for ep in eps:  # a known MAC/IP in a foreign VLAN is still that endpoint
                if (ep.mac is not None or ep.net is not None) and _roce_match(ep, side, with_vlan=False):
                    return Resolved(None, ep.tenant, f"RoCE MAC/IP (seen in VLAN {side.vlan}, declared {ep.vlan})")
            return Resolved(None, NO_TENANT, "no tenant endpoint matches")
        guid, how = None, ""
        if (side.lid is not None and 0xC000 <= side.lid < 0xFFFF) or (side.gid or "").startswith("ff"):
            return Resolved(None, NO_TENANT, "multicast group")
        if side.gid:
            guid, how = gid_port_guid(side.gid), "GID interface ID"
        elif side.lid is not None:
            owners = self.owners(side.lid)
            if len(owners) == 1:
                guid, how = owners[0].guid, f"LID {side.lid} via {owners[0].source}"
            elif len(owners) > 1:
                how = f"LID {side.lid} is shared by {len(owners)} ports and the packet has no GRH"
            else:
                how = f"LID {side.lid} is not mapped to any port"
        for ep in self._ib_candidates(side, guid):
            if (
                (guid is not None and ep.port_guid == guid)
                or (side.gid and ep.gid == side.gid)
                or (ep.lid is not None and ep.lid == side.lid and not side.gid)
            ):
                return Resolved(guid if guid is not None else ep.port_guid, ep.tenant, how or "declared LID")
            if guid is None and ep.port_guid is not None and side.lid is not None:
                ps = self.ports.ports.get(ep.port_guid)
                if ps and ps.lid == side.lid and len(self.owners(side.lid)) == 1:
                    return Resolved(ep.port_guid, ep.tenant, f"LID via {ps.source}")
        return Resolved(guid, NO_TENANT, how)


def _roce_match(ep: Endpoint, side: Side, with_vlan: bool) -> bool:
    if not ep.is_roce:
        return ep.gid is not None and side.ip is not None and ip_text(ep.gid) == side.ip
    if ep.mac is not None and ep.mac != (side.mac or "").lower():
        return False
    if ep.net is not None:
        if side.ip is None:
            return False
        try:
            if ipaddress.ip_address(side.ip) not in ep.net:
                return False
        except (ValueError, TypeError):
            return False
    if with_vlan and ep.vlan is not None and ep.vlan != side.vlan:
        return False
    return True
