"""ibwire's own fields in -V, in Wireshark's style: a label for each (the fields tshark's tree does not hold:
the `ibwire` section of ibwire.report.packets.tree.own_fields, the `[RC analysis]` under the BTH), shown as
tshark shows the items it works out, `[Label: value]`.  docs/fields.md gives each field's filter name."""

from ibwire.report.packets.ws_labels import FIELDS

IB = "infiniband."

LABELS = {
    "icrc.status": "ICRC status",
    "icrc.value": "ICRC value",
    "vcrc.status": "VCRC status",
    "vcrc.value": "VCRC value",
    "bth.transport": "Transport",
    "bth.opname": "Operation",
    "bth.fecn": "FECN",
    "bth.becn": "BECN",
    "bth.reserved6": "Reserved (6 bits)",
    "bth.p_key_full": "Full membership",
    "bth.p_key_base": "P_Key base",
    "bth.dcext": "DC extended transport header",
    "aeth.kind": "Syndrome kind",
    "aeth.credits": "Credits",
    "aeth.nak_code": "NAK code",
    "aeth.nak_name": "NAK",
    "aeth.rnr_timer": "RNR timer",
    "aeth.rnr_timer_ms": "RNR timer: {} ms",
    "atomiceth.va": "Virtual Address",
    "atomiceth.r_key": "Remote Key",
    "ieth.r_key": "Invalidated Remote Key",
    "immdt.data": "Immediate Data",
    "xrceth.xrcsrq": "XRC SRQ Number",
    "pad.pad": "Pad bytes",
    "ipoib.type": "IPoIB type",
    "erf.type": "ERF type",
    "erf.ts_sec": "ERF timestamp seconds",
    "erf.ts_frac": "ERF timestamp fraction",
    "erf.ext_header": "ERF extension header",
    "types.type": "Record type",
    "mad.summary": "Summary",
    "macc.pause_s": "Pause: {} seconds",
    "portinfo.capabilitymask2": "CapabilityMask2",
    "portinfo.multicastpkeytrapsuppressionenabled": "MulticastPKeyTrapSuppressionEnabled",
    "portinfo.linkspeedextactive": "LinkSpeedExtActive",
    "portinfo.linkspeedextsupported": "LinkSpeedExtSupported",
    "portinfo.linkspeedextenabled": "LinkSpeedExtEnabled",
    "portinfo.capabilitymask.cableinfosupported": "IsCableInfoSupported",
    "portinfo.capabilitymask.extendedspeedssupported": "IsExtendedSpeedsSupported",
    "portinfo.capabilitymask.capabilitymask2supported": "IsCapabilityMask2Supported",
    "portinfo.capabilitymask.vendorspecificmadstablesupported": "IsVendorSpecificMadsTableSupported",
    "portinfo.capabilitymask.mcastpkeytrapsuppressionsupported": "IsMcastPkeyTrapSuppressionSupported",
    "portinfo.capabilitymask.multicastfdbtopsupported": "IsMulticastFDBTopSupported",
    "portinfo.capabilitymask.hierarchyinfosupported": "IsHierarchyInfoSupported",
    "pathrecord.serviceid": "ServiceID",
    "pathrecord.qosclass": "QoSClass",
    "cm.req": "ConnectRequest",
    "cm.rep": "ConnectReply",
    "cm.rtu": "ReadyToUse",
    "cm.rej": "ConnectReject",
    "cm.mra": "MsgRcptAck",
    "cm.dreq": "DisconnectRequest",
    "cm.drsp": "DisconnectReply",
    "cm.lap": "LoadAlternatePath",
    "cm.apr": "AlternatePathResponse",
    "cm.sidr_req": "ServiceIDResReq",
    "cm.sidr_rep": "ServiceIDResReqResp",
    "bth.analysis.retransmission": "Retransmission",
    "bth.analysis.duplicate": "Duplicate request",
    "bth.analysis.lost": "Resent after a loss",
    "bth.analysis.out_of_order": "Out of order",
    "bth.analysis.psn_gap": "PSNs skipped before this request",
    "bth.analysis.not_captured": "PSNs not captured",
    "bth.analysis.retry_cause": "Retry cause",
    "bth.analysis.timeout_retransmission": "Retransmission after the ACK timeout",
    "bth.analysis.gave_up": "Last resend before the requester gave up",
    "bth.analysis.acks_frame": "This is an ACK to the request in frame",
    "bth.analysis.ack_rtt": "The RTT to ACK the request was: {} seconds",
    "bth.analysis.read_request_frame": "Response to the READ request in frame",
    "bth.analysis.nak": "NAK",
    "bth.analysis.rnr_wait": "RNR wait: {} seconds",
    "iscsi.data_call": "Data of the command in frame",
    "smb2.data_request": "Data of the request in frame",
    "rpcordma.chunk_call": "Chunk of the call in frame",
}


def label(key: str) -> str:
    """The label of an own field: LABELS', else tshark's for a field of that name, else its name's last part
    (`macc.cbfc.pause_s.c3` -> `Class 3 pause: {} seconds`, a reserved field -> `Reserved`)."""
    if key in LABELS:
        return LABELS[key]
    known = FIELDS.get(key) or FIELDS.get(IB + key)
    if known:
        return known[0]
    *_, parent, last = ["", *key.split(".")]
    if parent == "pause_s" and last[:1] == "c" and last[1:].isdigit():
        return f"Class {last[1:]} pause: {{}} seconds"
    if last.startswith("reserved"):
        return "Reserved"
    return last.replace("_", " ").capitalize()


def own_line(key: str, value) -> str:
    """An own field's -V line: `[Label: value]` (a label with `{}` puts the value there)."""
    text = label(key)
    return f"[{text.format(value)}]" if "{}" in text else f"[{text}: {value}]"
