"""The one table of MAD facts: management classes, method names, attribute ids → (name, layer name).

Sources: IBA Vol 1 §13.4.4 (classes, methods), §14.2.5 (SMP attributes), §15.2.5 (SA attributes),
§16.1.2 (PerfMgt), §12.6 (CM), Annex A10 (Congestion Control); opensm include/iba/ib_types.h.
Method names follow tshark's Info column (`SubnGet(NodeInfo)`, `SubnAdmGetTableResp(PathRecord)`).
Data only, no scapy: the compiled decoder's summary lines name MADs from here without loading the
layers; dissectors.mad.table resolves the layer names to the scapy classes.
"""

# class → (family, display name)
CLASSES = {
    0x01: ("smp", "SubnMgt LID-routed"),
    0x81: ("smp", "SubnMgt directed-route"),
    0x03: ("sa", "SubnAdm"),
    0x04: ("perf", "PerfMgt"),
    0x05: ("bm", "BaseboardMgt"),
    0x06: ("devmgt", "DevMgt"),
    0x07: ("cm", "ComMgt"),
    0x08: ("snmp", "SNMP"),
    0x21: ("cc", "CongestionControl"),
}
for _c in range(0x09, 0x10):
    CLASSES[_c] = ("vendor1", "Vendor")
for _c in range(0x30, 0x50):
    CLASSES[_c] = ("vendor2", "VendorOUI")
for _c in range(0x10, 0x30):
    CLASSES.setdefault(_c, ("app", "Application"))

# Generic method codes (§13.4.5); response bit is 0x80.
METHODS = {
    0x01: "Get",
    0x02: "Set",
    0x81: "GetResp",
    0x03: "Send",
    0x05: "Trap",
    0x06: "Report",
    0x86: "ReportResp",
    0x07: "TrapResp",
    0x12: "GetTable",
    0x92: "GetTableResp",
    0x13: "GetTraceTable",
    0x14: "GetMulti",
    0x94: "GetMultiResp",
    0x15: "Delete",
    0x95: "DeleteResp",
}
METHOD_PREFIX = {
    "smp": "Subn",
    "sa": "SubnAdm",
    "perf": "Perf",
    "bm": "BM",
    "devmgt": "DevMgt",
    "snmp": "SNMP",
    "cc": "CC",
    "vendor1": "Vendor",
    "vendor2": "Vendor",
    "app": "App",
}

_COMMON = {0x0001: "ClassPortInfo", 0x0002: "Notice", 0x0003: "InformInfo"}

# family → attribute id → its name, when the layer class has that name too; else (name, layer class
# name or None).  ATTRIBUTES below has (name, layer class name or None) for every attribute.
_ATTRIBUTES = {
    "smp": {
        **_COMMON,
        0x0010: "NodeDescription",
        0x0011: "NodeInfo",
        0x0012: "SwitchInfo",
        0x0014: "GUIDInfo",
        0x0015: "PortInfo",
        0x0016: "P_KeyTable",
        0x0017: "SLtoVLMappingTable",
        0x0018: "VLArbitrationTable",
        0x0019: "LinearForwardingTable",
        0x001A: ("RandomForwardingTable", None),
        0x001B: "MulticastForwardingTable",
        0x001C: ("LinkSpeedWidthPairsTable", None),
        0x0020: "SMInfo",
        0x0030: ("VendorDiag", None),
        0x0031: ("LedInfo", None),
        0x0032: ("MlnxExtPortInfo", None),
        # vendor-specific virtualization attributes, MLNX opensm ib_types.h (see virt.py)
        0xFFB0: "VirtualizationInfo",
        0xFFB1: "VPortInfo",
        0xFFB2: "VNodeInfo",
        0xFFB3: "VPortState",
        0xFFB4: "VNodeDescription",
        0xFFB5: "VPortGUIDInfo",
        0xFFB6: "VPortP_KeyTable",
    },
    "sa": {
        **_COMMON,
        0x0011: "NodeRecord",
        0x0012: "PortInfoRecord",
        0x0013: "SLtoVLMappingTableRecord",
        0x0014: "SwitchInfoRecord",
        0x0015: "LinearForwardingTableRecord",
        0x0016: ("RandomForwardingTableRecord", None),
        0x0017: "MulticastForwardingTableRecord",
        0x0018: "SMInfoRecord",
        0x0019: ("LinkSpeedWidthPairsTableRecord", None),
        0x00F3: "InformInfoRecord",
        0x0020: "LinkRecord",
        0x0030: "GuidInfoRecord",
        0x0031: "ServiceRecord",
        0x0033: "P_KeyTableRecord",
        0x0035: "PathRecord",
        0x0036: "VLArbitrationTableRecord",
        0x0038: "MCMemberRecord",
        0x0039: ("TraceRecord", None),
        0x003A: "MultiPathRecord",
        0x003B: ("ServiceAssociationRecord", None),
    },
    "perf": {
        0x0001: "ClassPortInfo",
        0x0010: "PortSamplesControl",
        0x0011: "PortSamplesResult",
        0x0012: "PortCounters",
        0x0015: "PortRcvErrorDetails",
        0x0016: "PortXmitDiscardDetails",
        0x001D: "PortCountersExtended",
        0x0036: "PortXmitDataSL",
        0x0037: "PortRcvDataSL",
    },
    "cm": {
        0x0001: "ClassPortInfo",
        0x0010: ("ConnectRequest", "CMReq"),
        0x0011: ("MsgRcptAck", "CMMra"),
        0x0012: ("ConnectReject", "CMRej"),
        0x0013: ("ConnectReply", "CMRep"),
        0x0014: ("ReadyToUse", "CMRtu"),
        0x0015: ("DisconnectRequest", "CMDreq"),
        0x0016: ("DisconnectReply", "CMDrep"),
        0x0017: ("ServiceIDResReq", "CMSidrReq"),
        0x0018: ("ServiceIDResReqResp", "CMSidrRep"),
        0x0019: ("LoadAlternatePath", "CMLap"),
        0x001A: ("AlternatePathResponse", "CMApr"),
    },
    "cc": {
        0x0001: "ClassPortInfo",
        0x0002: "Notice",
        0x0011: "CongestionInfo",
        0x0012: "CongestionKeyInfo",
        0x0013: ("CongestionLog", None),
        0x0014: "SwitchCongestionSetting",
        0x0015: ("SwitchPortCongestionSetting", None),
        0x0016: "CACongestionSetting",
        0x0017: "CongestionControlTable",
        0x0018: ("TimeStamp", "CCTimeStamp"),
    },
}
ATTRIBUTES = {fam: {a: (v, v) if isinstance(v, str) else v for a, v in ids.items()} for fam, ids in _ATTRIBUTES.items()}

NODE_TYPES = {1: "CA", 2: "Switch", 3: "Router"}
PORT_STATES = {0: "NoChange", 1: "Down", 2: "Init", 3: "Armed", 4: "Active"}
SM_STATES = {0: "NOTACTIVE", 1: "DISCOVERING", 2: "STANDBY", 3: "MASTER"}  # as opensm and smpquery sminfo name them
RMPP_TYPES = {0: "none", 1: "DATA", 2: "ACK", 3: "STOP", 4: "ABORT"}

# Link width/speed bits (IBA §14.2.5.6 PortInfo; extended speeds and LinkSpeedExt2 in IBA 1.3/1.5).
LINK_WIDTHS = {0x01: "1x", 0x02: "4x", 0x04: "8x", 0x08: "12x", 0x10: "2x"}
LINK_SPEEDS = {0x1: "SDR", 0x2: "DDR", 0x4: "QDR"}
LINK_SPEEDS_EXT = {0x1: "FDR", 0x2: "EDR", 0x4: "HDR", 0x8: "NDR"}
LINK_SPEEDS_EXT2 = {0x1: "XDR"}

# Notice trap numbers (§14.2.5.1, §14.3.11; 256-259 are the key-violation traps).
TRAPS = {
    64: "GID in service",
    65: "GID out of service",
    66: "new multicast group",
    67: "multicast group deleted",
    68: "paths no longer valid",
    69: "paths valid again",
    128: "link state change",
    129: "local link integrity threshold",
    130: "excessive buffer overrun",
    131: "flow control update watchdog",
    144: "capability mask / local changes",
    145: "system image GUID changed",
    256: "bad M_Key",
    257: "bad P_Key",
    258: "bad Q_Key",
    259: "bad P_Key at switch external port",
}
# A Notice's title in tshark's tree, by its TrapNumber/DeviceID (packet-infiniband.c's Trap_Description, read
# whether IsGeneric is set or not; tshark 4.0 and 4.4 word them alike, typos and leading space included).
TRAP_TITLES = {
    64: " (Informational) <GIDADDR> is now in service",
    65: " (Informational) <GIDADDR> is out of service",
    66: " (Informational) New Multicast Group with multicast address <GIDADDR> is now created",
    67: " (Informational) Multicast Group with multicast address <GIDADDR> is now deleted",
    68: " (Informational) Paths indicated by <PATH_REC> and <COMP_MASK> are no longer valid",
    69: " (Informational) Paths indicated by <PATH_REC> and <COMP_MASK> have been recomputed",
    128: " (Urgent) Link State of at least one port of switch at <LIDADDR> has changed",
    129: " (Urgent) Local Link Integrity threshold reached at <LIDADDR><PORTNO>",
    130: " (Urgent) Excessive Buffer OVerrun threshold reached at <LIDADDR><PORTNO>",
    131: " (Urgent) Flow Control Update watchdog timer expired at <LIDADDR><PORTNO>",
    144: " (Informational) CapMask, NodeDesc, LinkWidthEnabled or LinkSpeedEnabled at <LIDADDR> has been modified",
    145: " (Informational) SystemImageGUID at <LIDADDR> has been modified.  New value is <SYSTEMIMAGEGUID>",
    256: " (Security) Bad M_Key, <M_KEY> from <LIDADDR> attempted <METHOD> with <ATTRIBUTEID> and <ATTRIBUTEMODIFIER>",
    257: " (Security) Bad P_Key, <KEY> from <LIDADDR1><GIDADDR1><QP1> to <LIDADDR2><GIDADDR2><QP2> on <SL>",
    258: " (Security) Bad Q_Key, <KEY> from <LIDADDR1><GIDADDR1><QP1> to <LIDADDR2><GIDADDR2><QP2> on <SL>",
    259: " (Security) Bad P_Key, <KEY> from <LIDADDR1><GIDADDR1><QP1> to <LIDADDR2><GIDADDR2><QP2> on <SL> at switch"
    " <LIDADDR><PORTNO>",
}


def trap_title(number: int) -> str:
    """tshark's title of a Notice whose TrapNumber/DeviceID is `number`."""
    return TRAP_TITLES.get(number, f"Unknown or Vendor Specific Trap Number! (0x{number:02x})")


# CM REJ reasons (IBA §12.6.7.2 Table 112).
CM_REJ_REASONS = {
    1: "No QP available",
    2: "No EEC available",
    3: "No resources available",
    4: "Timeout",
    5: "Unsupported request",
    6: "Invalid Communication ID",
    7: "Invalid Communication Instance",
    8: "Invalid Service ID",
    9: "Invalid Transport Service Type",
    10: "Stale connection",
    11: "RDC does not exist",
    12: "Primary Remote Port GID rejected",
    13: "Primary Remote Port LID rejected",
    14: "Invalid Primary SL",
    15: "Invalid Primary Traffic Class",
    16: "Invalid Primary Hop Limit",
    17: "Invalid Primary Packet Rate",
    18: "Alternate Remote Port GID rejected",
    19: "Alternate Remote Port LID rejected",
    20: "Invalid Alternate SL",
    21: "Invalid Alternate Traffic Class",
    22: "Invalid Alternate Hop Limit",
    23: "Invalid Alternate Packet Rate",
    24: "Port CM Redirection",
    25: "Port Redirection Not Supported",
    26: "Path MTU not supported",
    27: "Insufficient Responder Resources",
    28: "Consumer Reject",
    29: "RNR Retry Count Reject",
    30: "Duplicate Local Comm ID",
    31: "Unsupported Class Version",
    32: "Invalid Primary Flow Label",
    33: "Invalid Alternate Flow Label",
}

RDMA_IP_CM_SID_MASK = 0xFFFFFFFFFF000000  # IBA Annex A11.2: IP-addressing service IDs
RDMA_IP_CM_SID_PREFIX = 0x0000000001000000


def family(mgmtclass):
    return CLASSES.get(mgmtclass, ("reserved", "Reserved"))[0]


def attribute_name(mgmtclass, attrid):
    """The name of an attribute (`NodeInfo`); None when unknown."""
    return ATTRIBUTES.get(family(mgmtclass), {}).get(attrid, (None,))[0]


def summary(mgmtclass, method, attrid):
    """One line like tshark's Info column: `SubnGet(NodeInfo)`, `CM: ConnectRequest`."""
    fam = family(mgmtclass)
    name = attribute_name(mgmtclass, attrid) or f"0x{attrid:04x}"
    if fam == "cm":
        return f"CM: {name}"
    if fam == "perf":
        return f"PERF ({name})"
    prefix = METHOD_PREFIX.get(fam)
    if prefix is None:
        return f"MAD class 0x{mgmtclass:02x} method 0x{method:02x} ({name})"
    return f"{prefix}{METHODS.get(method, f'Method0x{method:02x}')}({name})"


# PortInfo:CapabilityMask bits (IBA §14.2.5.6 Table 146; opensm ib_types.h IB_PORT_CAP_*); the names of bits
# 1-12 and 16-27 are Wireshark's, the rest follow them.  `issm` is how a port claims to host an SM.
CAPABILITY_MASK = tuple(
    (name, 1 << bit)
    for bit, name in (
        (1, "issm"),
        (2, "noticesupported"),
        (3, "trapsupported"),
        (4, "optionalipdsupported"),
        (5, "automaticmigrationsupported"),
        (6, "slmappingsupported"),
        (7, "mkeynvram"),
        (8, "pkeynvram"),
        (9, "ledinfosupported"),
        (10, "smdisabled"),
        (11, "systemimageguidsupported"),
        (12, "pkeyswitchexternalporttrapsupported"),
        (13, "cableinfosupported"),
        (14, "extendedspeedssupported"),
        (15, "capabilitymask2supported"),
        (16, "communicationmanagementsupported"),
        (17, "snmptunnelingsupported"),
        (18, "reinitsupported"),
        (19, "devicemanagementsupported"),
        (20, "vendorclasssupported"),
        (21, "drnoticesupported"),
        (22, "capabilitymasknoticesupported"),
        (23, "bootmanagementsupported"),
        (24, "linkroundtriplatencysupported"),
        (25, "clientregistrationsupported"),
        (26, "otherlocalchangesnoticesupported"),
        (27, "linkspeedwidthpairstablesupported"),
        (28, "vendorspecificmadstablesupported"),
        (29, "mcastpkeytrapsuppressionsupported"),
        (30, "multicastfdbtopsupported"),
        (31, "hierarchyinfosupported"),
    )
)
