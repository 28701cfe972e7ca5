"""What the capture's management datagrams say about the subnet, gathered as packets stream by.

SMPs (IBA 13.5.3 methods): GetResp NodeInfo / PortInfo over the same directed route tie port GUIDs to
LIDs (IBA 14.2.2: the InitialPath of a directed route), P_KeyTable GetResp sent to the master SM give the
programmed tables (14.2.5.7), SMInfo gives SM claims (14.2.5.13; the master is the claim winning the
election, analyze/fabric/sm.py), and so does PortInfo's CapabilityMask.IsSM (14.2.5.6) in a GetResp or in trap 144 (a port's capability mask changed); SubnSet
senders are kept for the SM rules; traps 256-259 (14.2.5.1, Table 118) and SA MCMemberRecord joins with
their answers (15.2.5.17).
"""

from __future__ import annotations

from typing import Optional

from dissectors.madnames import SM_STATES
from dissectors.numbers import PERMISSIVE_LID, PKEY_BASE, PKEY_FULL_MEMBER
from ibwire.analyze.fabric.sm import elect
from ibwire.audit.fields import as_int, first_of, gid_text
from ibwire.audit.state import FabricState

TRAPS = {256: "bad M_Key", 257: "bad P_Key", 258: "bad Q_Key", 259: "bad P_Key at switch external port"}


class MadObserver:
    def __init__(self, state: FabricState):
        self.state = state  # declared hardware state (--state), to find the master SM early
        self.wire = FabricState(sources=["capture SM traffic"])
        self.smp_sets: list = []  # (frame, sender LID or ("root", requester) for a route's root, DLID, attribute)
        self.traps: list = []  # (frame, trap number, details, slid)
        self.joins: list = []  # (frame, mgid, port gid, slid, transaction id)
        self.sa_answers: dict = {}  # transaction id -> (frame, status) of SubnAdmGetResp(MCMemberRecord)
        self.table_frames: dict = {}  # port GUID -> [(frame, set of P_Keys in that block)]
        self.is_sm: list = []  # (frame, port GUID or None, LID or None): CapabilityMask.IsSM set
        self.dr_roots: dict = {}  # requester -> port GUID answering its NodeInfo over the empty path
        self._dr_ports: dict = {}  # (requester, DR path) -> port GUID (NodeInfo seen over that path)
        self._sminfo: dict = {}  # port GUID -> its last SMInfo (state, priority) for the election

    def feed(self, number: int, flat: dict, mclass: int) -> None:
        method = as_int(flat.get("mad.method")) or 0
        attr = as_int(flat.get("mad.attributeid")) or 0
        slid = as_int(flat.get("lrh.slid"))
        dlid = as_int(flat.get("lrh.dlid"))
        dr = mclass == 0x81
        # a route starts at its requester, told apart by the upper 32 TID bits (its MAD layer owns them)
        path = ((as_int(flat.get("mad.transactionid")) or 0) >> 32, _dr_path(flat)) if dr else None
        if mclass in (0x01, 0x81):
            if method == 0x02:  # SubnSet
                sender = as_int(flat.get("smpdirected.drslid")) if dr else slid
                if sender == PERMISSIVE_LID:
                    sender = slid if slid != PERMISSIVE_LID else ("root", path and path[0])  # its requester's port
                self.smp_sets.append((number, sender, dlid, attr))
            if method == 0x05 and attr == 0x0002:  # SubnTrap(Notice)
                self._trap(number, flat, slid)
                from dissectors.mad.smp import IS_SM  # (loaded with the MAD layers that decoded this frame)

                if (
                    as_int(first_of(flat, "notice.trapnumberdeviceid")) == 144
                    and (as_int(first_of(flat, "trap.capabilitymask")) or 0) & IS_SM
                ):
                    lid = as_int(first_of(flat, "trap.lidaddr")) or slid
                    self.is_sm.append((number, None, lid))
            if method == 0x81:  # GetResp: what the port really holds
                if not dr and attr == 0x0016 and not self._to_master(dlid):
                    return  # a table shown to a non-SM requester
                self._smp_data(number, flat, attr, slid if not dr else None, path)
        elif mclass == 0x03:
            if method == 0x05 and attr == 0x0002:
                self._trap(number, flat, slid)
            if method == 0x02 and attr == 0x0038:  # SubnAdmSet(MCMemberRecord): join
                self.joins.append(
                    (
                        number,
                        gid_text(first_of(flat, "mcmemberrecord.mgid")),
                        gid_text(first_of(flat, "mcmemberrecord.portgid")),
                        slid,
                        as_int(flat.get("mad.transactionid")),
                    )
                )
            if method == 0x81 and attr == 0x0038:  # the SA's answer: status 0 grants the join
                self.sa_answers.setdefault(
                    as_int(flat.get("mad.transactionid")), (number, as_int(flat.get("mad.status")) or 0)
                )

    def _smp_data(self, number, flat, attr, lid_of_responder, path):
        if attr == 0x0011:  # NodeInfo
            guid = as_int(first_of(flat, "nodeinfo.portguid"))
            if not guid:
                return
            ps = self.wire.port(guid, "capture NodeInfo")
            ntype = as_int(first_of(flat, "nodeinfo.nodetype"))
            ps.node_type = {1: "ca", 2: "switch", 3: "router"}.get(ntype, ps.node_type)
            ps.node_guid = as_int(first_of(flat, "nodeinfo.nodeguid"))
            if lid_of_responder and lid_of_responder != PERMISSIVE_LID:
                ps.lid = lid_of_responder
                ps.source = "capture NodeInfo (LID-routed response)"
            if path:
                self._dr_ports[path] = guid
                if path[1] == "00":
                    self.dr_roots[path[0]] = guid
        elif attr == 0x0015:  # PortInfo
            lid = as_int(first_of(flat, "portinfo.lid"))
            guid = self._responder(path, lid_of_responder)
            if as_int(first_of(flat, "portinfo.capabilitymask.issm")):
                self.is_sm.append((number, guid, lid or None))
            if guid is not None and lid:
                ps = self.wire.port(guid, "capture PortInfo")
                ps.lid = lid
                ps.source = (
                    "capture NodeInfo+PortInfo over the same directed route"
                    if path
                    else "capture PortInfo (LID-routed response)"
                )
        elif attr == 0x0016:  # P_KeyTable
            guid = self._responder(path, lid_of_responder)
            if guid is None:
                return
            block = (as_int(flat.get("mad.attributemodifier")) or 0) & 0xFFFF
            bases = _as_list(first_of(flat, "p_keytable.p_keybase"))
            members = _as_list(first_of(flat, "p_keytable.membershiptype"))
            if not bases:
                return
            ps = self.wire.port(guid, "capture")
            table = list(ps.pkeys or [])
            entries = {
                (int(b) & PKEY_BASE) | (PKEY_FULL_MEMBER if (i < len(members) and int(members[i])) else 0)
                for i, b in enumerate(bases)
            } - {0, 0x8000}
            ps.pkeys = [p for p in table if p] if block else []
            ps.pkeys = sorted(set(ps.pkeys) | entries)
            ps.pkey_source = "capture P_KeyTable MADs (responses to the master SM)"
            self.table_frames.setdefault(guid, []).append((number, entries))
        elif attr == 0x0020:  # SMInfo
            guid = as_int(first_of(flat, "sminfo.guid"))
            st = as_int(first_of(flat, "sminfo.smstate"))
            if guid and st is not None:
                self.wire.sm_claims.setdefault(guid, set()).add((SM_STATES.get(st, str(st)), number))
                self._sminfo[guid] = {
                    "guid": guid,
                    "state": SM_STATES.get(st, str(st)),
                    "priority": as_int(first_of(flat, "sminfo.priority")) or 0,
                }
                master, _ = elect(list(self._sminfo.values()))
                self.wire.master_sm = master["guid"] if master else self.wire.master_sm

    def _responder(self, path: Optional[tuple], lid: Optional[int]) -> Optional[int]:
        """Port GUID of a GetResp's sender: NodeInfo seen over the same route, else the port holding its LID."""
        guid = self._dr_ports.get(path) if path else None
        if guid is None and lid:
            guid = next((p.guid for p in self.wire.ports.values() if p.lid == lid), None)
        return guid

    def _trap(self, number, flat, slid):
        num = as_int(first_of(flat, "notice.trapnumberdeviceid", "notice.trapnumber"))
        if num not in TRAPS:
            return
        details = {k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("trap.") and not isinstance(v, bool)}
        self.traps.append((number, num, details, slid))

    def _to_master(self, dlid) -> bool:
        """Is this LID the master SM's?  Unknown (no SM seen yet) counts as yes: nothing to contradict it."""
        sm = self.state.master_sm or self.wire.master_sm
        ps = self.wire.ports.get(sm) or self.state.ports.get(sm) if sm else None
        return ps is None or ps.lid is None or ps.lid == dlid


def _dr_path(flat: dict) -> str:
    """The directed route as hex, InitialPath[0..HopCount] (IBA 14.2.2: entry 0 is unused, one byte a hop)."""
    raw = flat.get("smpdirected.initialpath")
    hops = as_int(flat.get("smpdirected.hopcount"))
    if raw is None or hops is None:
        return ""
    raw = raw.hex() if isinstance(raw, (bytes, bytearray)) else str(raw)
    return raw[: 2 * (hops + 1)]


def _as_list(v) -> list:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, str) and "," in v:
        return [int(x, 0) for x in v.split(",")]
    return [v]
