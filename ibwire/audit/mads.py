"""What the capture's management datagrams say about the subnet, gathered as packets stream by.

The subnet itself (ports, LIDs, node types, P_Key tables, SMInfo) is the one model `ibwire fabric` shows
(analyze/fabric/model.py: directed routes tie an SMP to its node, per requester by the upper 32 TID bits;
LID-routed ones by LID), built from the audited frames.  The audit is stricter about P_Key tables: only
P_KeyTable GetResp (IBA 14.2.5.7) over a directed route or sent to the master SM count (what the SM saw
programmed; an answer shown to another requester proves nothing to it).

Kept here, as events with their frames: SubnSet senders for the SM rules; SMInfo claims (14.2.5.13; the
master is the claim winning the election, analyze/fabric/sm.py); PortInfo's CapabilityMask.IsSM (14.2.5.6)
in a GetResp or in trap 144 (a port's capability mask changed); traps 256-259 (14.2.5.1, Table 118) and SA
MCMemberRecord joins with their answers (15.2.5.17).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from dissectors.madnames import SM_STATES
from dissectors.numbers import PERMISSIVE_LID
from ibwire.analyze.fabric import view
from ibwire.analyze.fabric.model import FabricBuilder
from ibwire.analyze.fabric.sm import elect
from ibwire.audit.fields import as_int, first_of, gid_text
from ibwire.audit.state import FabricState, from_view

TRAPS = {256: "bad M_Key", 257: "bad P_Key", 258: "bad Q_Key", 259: "bad P_Key at switch external port"}
GET_RESP = 0x81


class _Carrier(NamedTuple):
    """The packet that carried a MAD, as the fabric model reads it (extract.MadFrame's addressing)."""

    number: int
    time: float
    slid: Optional[int]
    dlid: Optional[int]


class MadObserver:
    def __init__(self, state: FabricState):
        self.state = state  # declared hardware state (--state), to find the master SM early
        self.fabric = FabricBuilder(accept_table=self._shown_to_master)
        self.smp_sets: list = []  # (frame, sender LID or ("root", requester) for a route's root, DLID, attribute)
        self.traps: list = []  # (frame, trap number, details, slid)
        self.joins: list = []  # (frame, mgid, port gid, slid, transaction id)
        self.sa_answers: dict = {}  # transaction id -> (frame, status) of SubnAdmGetResp(MCMemberRecord)
        self.is_sm: list = []  # (frame, port GUID or None, LID or None): CapabilityMask.IsSM set
        self._claims: dict = {}  # port GUID -> {(SMState text, frame)}: every SMInfo answer
        self._wire: Optional[FabricState] = None

    def feed(self, number: int, flat: dict, mclass: int) -> None:
        method = as_int(flat.get("mad.method")) or 0
        attr = as_int(flat.get("mad.attributeid")) or 0
        slid = as_int(flat.get("lrh.slid"))
        dlid = as_int(flat.get("lrh.dlid"))
        if mclass in (0x01, 0x81):
            carrier = _Carrier(number, 0.0, slid, dlid)
            self._smp(carrier, flat, mclass, method, attr)
            self.fabric.offer(carrier, flat)
            self._wire = None
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
            if method == GET_RESP and attr == 0x0038:  # the SA's answer: status 0 grants the join
                self.sa_answers.setdefault(
                    as_int(flat.get("mad.transactionid")), (number, as_int(flat.get("mad.status")) or 0)
                )

    def _smp(self, carrier: _Carrier, flat: dict, mclass: int, method: int, attr: int) -> None:
        """The events of one SMP: SubnSet senders, traps, IsSM and SMInfo claims."""
        number, slid = carrier.number, carrier.slid
        if method == 0x02:  # SubnSet
            sender = as_int(flat.get("smpdirected.drslid")) if mclass == 0x81 else slid
            if sender == PERMISSIVE_LID:  # a route's root: its requester's port
                requester = (as_int(flat.get("mad.transactionid")) or 0) >> 32
                sender = slid if slid != PERMISSIVE_LID else ("root", requester)
            self.smp_sets.append((number, sender, carrier.dlid, attr))
        if method == 0x05 and attr == 0x0002:  # SubnTrap(Notice)
            self._trap(number, flat, slid)
            from dissectors.mad.smp import IS_SM  # (loaded with the MAD layers that decoded this frame)

            if (
                as_int(first_of(flat, "notice.trapnumberdeviceid")) == 144
                and (as_int(first_of(flat, "trap.capabilitymask")) or 0) & IS_SM
            ):
                self.is_sm.append((number, None, as_int(first_of(flat, "trap.lidaddr")) or slid))
        if method != GET_RESP:
            return
        if attr == 0x0015 and as_int(first_of(flat, "portinfo.capabilitymask.issm")):  # PortInfo
            lid = as_int(first_of(flat, "portinfo.lid"))
            self.is_sm.append((number, self._responder(carrier, flat, lid), lid or None))
        elif attr == 0x0020:  # SMInfo
            guid = as_int(first_of(flat, "sminfo.guid"))
            st = as_int(first_of(flat, "sminfo.smstate"))
            if guid and st is not None:
                self._claims.setdefault(guid, set()).add((SM_STATES.get(st, str(st)), number))

    def _responder(self, carrier: _Carrier, flat: dict, lid: Optional[int]) -> Optional[int]:
        """Port GUID of a GetResp's sender: the node its route or LID leads to, else the port holding `lid`."""
        where = self.fabric.locate(carrier, flat)
        if where is not None:
            return self.fabric.port_guid(*where)
        return next((p.guid for p in self.fabric.ports.values() if lid and p.lid == lid and p.guid), None)

    def _shown_to_master(self, carrier, flat: dict) -> bool:
        """Whether a P_KeyTable datum counts: a GetResp over a directed route, or one sent to the master SM's
        LID (unknown, no SM seen yet: nothing contradicts it)."""
        if flat.get("mad.method") != GET_RESP:
            return False
        if flat.get("mad.mgmtclass") == 0x81:
            return True
        lid = self._master_lid()
        return lid is None or lid == carrier.dlid

    def _master_lid(self) -> Optional[int]:
        sm = self.state.master_sm
        if sm is None:
            master, _ = elect(list(self.fabric.sminfo.values()))
            sm = master["guid"] if master else None
        if sm is None:
            return None
        lid = next((p.lid for p in self.fabric.ports.values() if p.guid == sm and p.lid), None)
        declared = self.state.ports.get(sm)
        return lid or (declared.lid if declared else None)

    @property
    def wire(self) -> FabricState:
        """What the capture's SMPs say: the fabric model of everything fed so far, with the SMInfo claims."""
        if self._wire is None:
            self.fabric.finish()
            self._wire = from_view(
                view(self.fabric, ""),
                "the capture's SMPs",
                "capture SM traffic",
                "the capture's P_KeyTable answers to the master SM",
            )
            self._wire.sm_claims = self._claims
        return self._wire

    @property
    def table_frames(self) -> dict:
        """Port GUID -> [(frame, P_Keys of that block)] of every P_KeyTable answer taken."""
        out: dict = {}
        for p in self.fabric.ports.values():
            guid = p.guid or self.fabric.port_guid(p.node_guid, p.port_num)
            if guid is not None and p.pkey_frames:
                out.setdefault(guid, []).extend(p.pkey_frames)
        return {g: sorted(v, key=lambda fk: fk[0]) for g, v in out.items()}

    @property
    def dr_roots(self) -> dict:
        """Requester (upper 32 TID bits) -> the port GUID answering its NodeInfo over the empty route."""
        return {
            req: self.fabric.port_guid(node, port)
            for (req, path), (node, port) in self.fabric.routes.items()
            if not path
        }

    def _trap(self, number, flat, slid):
        num = as_int(first_of(flat, "notice.trapnumberdeviceid", "notice.trapnumber"))
        if num not in TRAPS:
            return
        details = {k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("trap.") and not isinstance(v, bool)}
        self.traps.append((number, num, details, slid))
