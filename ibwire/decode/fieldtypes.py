"""Every display-filter field ibwire knows, with its type: the names a filter, `-e` and JSON keys use.

Encapsulation fields carry Wireshark's names and types (tshark -G fields); InfiniBand fields come from the
scapy layers themselves (dissectors/: `ws_name`, field classes, `ws_alias`, `ws_extra`), read the first
time a filter names one, so a filter on transport fields never loads scapy.
"""

from functools import lru_cache
from typing import Dict, Optional

from dissectors.dcbfacts import LLDP_CAPABILITIES, LLDP_ORG_FLAGS, PMD_CAPABILITIES
from dissectors.lldp_org import BITS as LLDP_BITS
from dissectors.lldp_org import DISPLAY as LLDP_DISPLAY
from dissectors.lldp_org import EXPERTS as LLDP_EXPERTS
from dissectors.lldp_org import NUMBERS as LLDP_NUMBERS
from dissectors.lldp_org import STRINGS as LLDP_STRINGS
from dissectors.madnames import CAPABILITY_MASK
from ibwire.decode.docfields import TYPES as DOC_TYPES
from ibwire.decode.flagbits import WIDTHS as FLAG_WIDTHS

UINT, INT, FLOAT, STRING, BYTES, MAC, IPV4, IPV6, PROTO = (
    "uint",
    "int",
    "float",
    "string",
    "bytes",
    "mac",
    "ipv4",
    "ipv6",
    "protocol",
)


def _group(proto: str, ftype: str, *names: str) -> Dict[str, str]:
    return {f"{proto}.{n}": ftype for n in names}


def _nvme_tracked():
    from dissectors.nvmetable import TRACKED

    return TRACKED


def _rpcrdma(name: str) -> dict:
    from dissectors import nfs3, rpcrdmatable, rpcrdmav2

    return {**getattr(rpcrdmatable, name), **getattr(rpcrdmav2, name), **getattr(nfs3, name)}


def _iser(name: str) -> dict:
    from dissectors import iscsitable

    return getattr(iscsitable, name)


def _smbdirect(name: str) -> dict:
    from dissectors import smb2table, smbdirecttable

    return {**getattr(smbdirecttable, name), **getattr(smb2table, name)}


ENCAP: Dict[str, str] = {
    **{
        p: PROTO
        for p in (
            "frame",
            "eth",
            "vlan",
            "ip",
            "ipv6",
            "udp",
            "tcp",
            "arp",
            "icmp",
            "icmpv6",
            "sll",
            "erf",
            "ipoib",
            "infiniband",
            "infiniband_link",
            "_ws.malformed",
        )
    },
    **_group("frame", UINT, "number", "len", "cap_len", "linktype", "interface_id"),
    "frame.protocols": STRING,
    **_group("frame", FLOAT, "time_epoch", "time_relative", "time_delta"),
    **_group("eth", MAC, "src", "dst", "addr"),
    "eth.type": UINT,
    **_group("vlan", UINT, "id", "priority", "dei", "etype"),
    **_group("ip", IPV4, "src", "dst", "addr"),
    **_group(
        "ip",
        UINT,
        "version",
        "hdr_len",
        "dsfield",
        "dsfield.dscp",
        "dsfield.ecn",
        "len",
        "id",
        "ttl",
        "proto",
        "checksum",
    ),
    **_group("ipv6", IPV6, "src", "dst", "addr"),
    **_group("ipv6", UINT, "tclass", "tclass.dscp", "tclass.ecn", "flow", "plen", "nxt", "hlim"),
    **_group("udp", UINT, "srcport", "dstport", "port", "length", "checksum"),
    **_group("arp", UINT, "hw.type", "proto.type", "hw.size", "proto.size", "opcode"),
    **_group("arp", BYTES, "src.hw", "dst.hw"),
    **_group("arp", MAC, "src.hw_mac", "dst.hw_mac"),
    **_group("arp", IPV4, "src.proto_ipv4", "dst.proto_ipv4"),
    **_group("icmp", UINT, "type", "code", "ident", "seq"),
    **_group(
        "icmpv6",
        UINT,
        "type",
        "code",
        "echo.identifier",
        "echo.sequence_number",
        "nd.na.flag.r",
        "nd.na.flag.s",
        "nd.na.flag.o",
    ),
    **_group("icmpv6", IPV6, "nd.ns.target_address", "nd.na.target_address"),
    **_group("tcp", UINT, "srcport", "dstport", "port", "seq", "ack", "flags", "window_size_value"),
    **_group("sll", UINT, "pkttype", "hatype", "halen", "etype"),
    # ibwire's own, in the same style: CRC verdicts, the encapsulation kind, RoCE payload length
    **_group("icrc", STRING, "status"),
    **_group("vcrc", STRING, "status"),
    "link.kind": STRING,
    "payload.len": UINT,
    "mad.summary": STRING,
    "payload": PROTO,
    "padding": PROTO,
    "payload.data": BYTES,
    "payload.length": UINT,
    "padding.data": BYTES,
    **_nvme_tracked(),
    **_rpcrdma("FIELDS"),
    **_iser("FIELDS"),
    **_smbdirect("FIELDS"),
    "rmpp.reassembled": PROTO,
    **_group("rmpp.reassembled", UINT, "segments", "records", "complete"),
    # MAC control PAUSE/PFC and LLDP DCBX (dissectors.dcb), Wireshark 4.0's names; `*pause_s` are ibwire's own
    **{p: PROTO for p in ("macc", "lldp")},
    **_group(
        "macc",
        UINT,
        "opcode",
        "pause_time",
        "cbfc.enbv",
        *(f"cbfc.{f}.c{p}" for f in ("enbv", "pause_time") for p in range(8)),
    ),
    **_group("macc", FLOAT, "pause_s", *(f"cbfc.pause_s.c{p}" for p in range(8))),
    **_group(
        "lldp",
        UINT,
        "tlv.type",
        "tlv.len",
        "chassis.subtype",
        "port.subtype",
        "time_to_live",
        "orgtlv.oui",
        "ieee.802_1.subtype",
        "unknown_subtype",
        "dcbx.ieee.willing",
        "dcbx.ieee.ets.cbs",
        "dcbx.ieee.ets.maxtcs",
        "dcbx.feature.pg.reserved",
        "dcbx.ieee.pfc.mbc",
        "dcbx.ieee.pfc.numtcs",
        "dcbx.ieee.app.reserved",
        "dcbx.ieee.app.prio",
        "dcbx.iee.app.sf",
        "dcbx.feature.app.proto",
        "dcbx.proto",
        "dcbx.type",
        "dcbx.len",
        "dcbx.version",
        "dcbx.max_version",
        "dcbx.control.seq",
        "dcbx.control.ack",
        "dcbx.feature.enabled",
        "dcbx.feature.willing",
        "dcbx.feature.error",
        "dcbx.feature.subtype",
        "dcbx.feature.pg.numtcs",
        "dcbx.feature.pfc.numtcs",
        "dcbx.feature.app.oui",
        "dcbx.feature.app.sf",
        "dcbx.feature.app.prio",
        *(
            f"dcbx.{f}{i}"
            for f in ("feature.pg.pgid_prio", "feature.pg.per", "ieee.ets.tsa", "feature.pfc.prio")
            for i in range(8)
        ),
    ),
    **_group(
        "lldp",
        UINT,
        *(f"tlv.{w}system_cap{b}" for w in ("", "enable_") for b in ("", *(f".{c}" for c in LLDP_CAPABILITIES))),
        "mgn.address.len",
        "mgn.address.subtype",
        "mgn.interface.subtype",
        "mgn.interface.number",
        "mgn.obj.len",
        "ieee.802_1.port_vlan.id",
        "ieee.802_3.subtype",
        "ieee.802_3.max_frame_size",
        *(f"ieee.{k}" for k in LLDP_ORG_FLAGS),
        *(f"ieee.{k}.{bit}" for k, bits in LLDP_ORG_FLAGS.items() for bit, _ in bits),
        *(f"ieee.802_3.pmd_auto_neg_advertised_caps_inv.{c}" for c in PMD_CAPABILITIES),
        "ieee.802_1.port_proto_vlan.id",
        "ieee.802_1.vlan.id",
        "ieee.802_1.vlan.name_len",
        "ieee.802_1.aggregated_port_id",
        "ieee.802_3.pmd_mau_type",
        *LLDP_NUMBERS,
        *LLDP_BITS,
    ),
    "lldp.ieee.802_1.vlan.name": STRING,
    **dict.fromkeys((f"lldp.{k}" for k in LLDP_STRINGS), STRING),
    "lldp.ieee.802_1.proto.id": BYTES,
    **dict.fromkeys((f"lldp.{k}" for k in LLDP_EXPERTS), PROTO),
    **_group("lldp", MAC, "chassis.id.mac", "port.id.mac"),
    "lldp.mgn.addr.ip4": IPV4,
    "lldp.mgn.addr.ip6": IPV6,
    "lldp.mgn.addr.hex": BYTES,
    "lldp.mgn.obj.id": STRING,
    "lldp.unknown_subtype.content": BYTES,
    **_group("lldp", STRING, "chassis.id", "port.id", "port.desc", "tlv.system.name", "tlv.system.desc"),
}

# Fields present several times per frame by definition: Wireshark's "either end" fields, in header order.
EITHER = {
    "eth.addr": ("eth.dst", "eth.src"),
    "ip.addr": ("ip.src", "ip.dst"),
    "ipv6.addr": ("ipv6.src", "ipv6.dst"),
    "udp.port": ("udp.srcport", "udp.dstport"),
    "tcp.port": ("tcp.srcport", "tcp.dstport"),
}


# How tshark 4.0 prints each field it shares with ibwire (`tshark -G fields`, read once): 0 by the field's
# type (decimal, address, text), -1 bytes (aa:bb:…), 1 a boolean (0/1), n >= 2 hexadecimal "0x…" zero-padded to n digits
# (BASE_HEX: the width of the field's type, FT_UINT8 2 … FT_UINT64 16, whatever its bitmask).  Fields
# missing here are ibwire's own.  `-T fields`, `-T json` and `-T ek` print values by this table.
TSHARK_DISPLAY: Dict[str, int] = {
    name: digits
    for digits, names in {
        -1: (
            "aeth arp.dst.hw arp.src.hw atomicacketh atomiceth bth cm.dreq.private cm.drsp.private cm.rej.ari "
            "cm.rej.private cm.rep.private cm.req.alt_localgid cm.req.alt_remotegid cm.req.ip_cm cm.req.ip_cm.private "
            "cm.req.private cm.req.serviceid.prefix cm.rtu.private deth grh ieth immdt linkrecord.servicekey "
            "linkrecord.servicename lrh mad mad.data notice.datadetails p_keytable.p_keytableblock payload rdeth reth "
            "rmpp rwh smpdirected smpdirected.initialpath smpdirected.returnpath smplid smplid.smpdata "
            "trap.drnoticereturnpath vendor"
        ),
        0: (
            "aeth.msn aeth.syndrome aeth.syndrome.credit_count aeth.syndrome.opcode aeth.syndrome.reserved "
            "arp.dst.hw_mac arp.dst.proto_ipv4 arp.hw.size arp.hw.type arp.opcode arp.proto.size arp.src.hw_mac "
            "arp.src.proto_ipv4 atomicacketh.origremdt atomiceth.cmpdt atomiceth.swapdt bth.opcode bth.p_key "
            "bth.padcnt bth.psn bth.reserved7 bth.tver classportinfo classportinfo.redirectgid classportinfo.trapgid "
            "cm.req.alt_locallid cm.req.alt_remotelid cm.req.ip_cm.dip4 cm.req.ip_cm.dip6 cm.req.ip_cm.sip4 "
            "cm.req.ip_cm.sip6 cm.req.prim_localgid cm.req.prim_locallid cm.req.prim_remotegid cm.req.prim_remotelid "
            "erf.lctr erf.rlen erf.wlen eth.addr eth.dst eth.src frame.cap_len frame.len frame.number frame.protocols "
            "frame.time_delta frame.time_epoch frame.time_relative grh.dgid grh.flowlabel grh.hoplmt grh.ipver "
            "grh.nxthdr grh.paylen grh.sgid grh.tclass icmp.code icmp.type infiniband_link.fccl infiniband_link.fctbs "
            "infiniband_link.op infiniband_link.vl informinfo.gid informinforecord.subscribergid ip.addr "
            "ip.dsfield.dscp ip.dsfield.ecn ip.dst ip.hdr_len ip.len ip.proto ip.src ip.ttl ip.version ipv6.addr "
            "ipv6.dst ipv6.hlim ipv6.nxt ipv6.plen ipv6.src ipv6.tclass.dscp ipv6.tclass.ecn linkrecord.servicegid "
            "lrh.dlid lrh.lver lrh.pktlen lrh.reserved2 lrh.reserved5 lrh.sl lrh.slid mcmemberrecord.mgid "
            "mcmemberrecord.portgid multipathrecord.sdgid nodedescription.nodestring pathrecord.dgid pathrecord.sgid "
            "portcounters portcounters.excessivebufferoverrunerrors portcounters.linkdownedcounter "
            "portcounters.linkerrorrecoverycounter portcounters.locallinkintegrityerrors "
            "portcounters.portrcvconstrainterrors portcounters.portrcvdata portcounters.portrcverrors "
            "portcounters.portrcvpkts portcounters.portrcvremotephysicalerrors portcounters.portrcvswitchrelayerrors "
            "portcounters.portxmitconstrainterrors portcounters.portxmitdata portcounters.portxmitdiscards "
            "portcounters.portxmitpkts portcounters.symbolerrorcounter portcounters.vl15dropped portcounters_ext "
            "portcounters_ext.portmulticastrcvpkts portcounters_ext.portmulticastxmitpkts "
            "portcounters_ext.portrcvdata portcounters_ext.portrcvpkts portcounters_ext.portunicastrcvpkts "
            "portcounters_ext.portunicastxmitpkts portcounters_ext.portxmitdata portcounters_ext.portxmitpkts "
            "rdeth.eecnxt reth.dmalen sll.halen sll.hatype sll.pkttype tcp.ack tcp.dstport tcp.port tcp.seq "
            "tcp.srcport tcp.window_size_value trap.datavalid trap.gidaddr trap.gidaddr1 trap.gidaddr2 trap.swlidaddr "
            "udp.dstport udp.length udp.port udp.srcport vlan.id vlan.priority"
        ),
        1: ("bth.a bth.m bth.se vlan.dei"),
        2: (
            "classportinfo.baseversion classportinfo.classversion classportinfo.redirectsl classportinfo.redirecttc "
            "classportinfo.reserved classportinfo.resptimevalue classportinfo.trapsl classportinfo.traptc "
            "cm.rej.msgrej cm.rej.rejinfolen cm.rej.reserved0 cm.rej.reserved1 cm.rep.e2eflowctrl cm.rep.failoveracc "
            "cm.rep.initdepth cm.rep.reserved cm.rep.respres cm.rep.rnrretrcount cm.rep.srq cm.rep.tgtackdelay "
            "cm.req.alt_hoplim cm.req.alt_localacktout cm.req.alt_reserved1 cm.req.alt_sl cm.req.alt_subnetlocal "
            "cm.req.alt_tfcclass cm.req.e2eflowctrl cm.req.ext_transport cm.req.initdepth cm.req.ip_cm.ipv "
            "cm.req.ip_cm.majv cm.req.ip_cm.minv cm.req.ip_cm.reserved cm.req.localresptout cm.req.maxcmretr "
            "cm.req.pppmtu cm.req.prim_hoplim cm.req.prim_localacktout cm.req.prim_reserved1 cm.req.prim_reserved2 "
            "cm.req.prim_sl cm.req.prim_subnetlocal cm.req.prim_tfcclass cm.req.rdcexist cm.req.remoteresptout "
            "cm.req.responderres cm.req.retrcount cm.req.rnrretrcount cm.req.serviceid.protocol cm.req.srq "
            "cm.req.transpsvctype erf.flags informinfo.isgeneric informinfo.resptimevalue informinfo.subscribe "
            "ip.dsfield linearforwardingtable.port linkrecord.fromport linkrecord.toport lrh.lnh lrh.vl "
            "mad.baseversion mad.classversion mad.method mad.mgmtclass mcmemberrecord.hoplimit "
            "mcmemberrecord.joinstate mcmemberrecord.mtu mcmemberrecord.mtuselector mcmemberrecord.packetlifetime "
            "mcmemberrecord.packetlifetimeselector mcmemberrecord.proxyjoin mcmemberrecord.rate "
            "mcmemberrecord.rateselector mcmemberrecord.scope mcmemberrecord.sl mcmemberrecord.tclass "
            "multipathrecord.dgidcount multipathrecord.gidscope multipathrecord.hoplimit "
            "multipathrecord.independenceselector multipathrecord.mtu multipathrecord.mtuselector "
            "multipathrecord.numbpath multipathrecord.packetlifetime multipathrecord.packetlifetimeselector "
            "multipathrecord.rate multipathrecord.rateselector multipathrecord.rawtraffic multipathrecord.reversible "
            "multipathrecord.sgidcount multipathrecord.sl multipathrecord.tclass nodeinfo.baseversion "
            "nodeinfo.classversion nodeinfo.localportnum nodeinfo.nodetype nodeinfo.numports notice.isgeneric "
            "notice.noticetoggle notice.type p_keytable.membershiptype pathrecord.hoplimit pathrecord.mtu "
            "pathrecord.mtuselector pathrecord.numbpath pathrecord.packetlifetime pathrecord.packetlifetimeselector "
            "pathrecord.preference pathrecord.rate pathrecord.rateselector pathrecord.rawtraffic "
            "pathrecord.reversible pathrecord.tclass portcounters.portselect portcounters_ext.portselect "
            "portinfo.clientreregister portinfo.filterrawinbound portinfo.filterrawoutbound portinfo.guidcap "
            "portinfo.hoqlife portinfo.inittype portinfo.inittypereply portinfo.linkdowndefaultstate "
            "portinfo.linkspeedactive portinfo.linkspeedenabled portinfo.linkspeedsupported portinfo.linkwidthactive "
            "portinfo.linkwidthenabled portinfo.linkwidthsupported portinfo.lmc portinfo.localphyerrors "
            "portinfo.localportnum portinfo.m_keyprotectbits portinfo.mastersmsl portinfo.mtucap portinfo.neighbormtu "
            "portinfo.operationalvls portinfo.overrunerrors portinfo.partitionenforcementinbound "
            "portinfo.partitionenforcementoutbound portinfo.portphysicalstate portinfo.portstate "
            "portinfo.resptimevalue portinfo.subnettimeout portinfo.vlarbitrationhighcap portinfo.vlarbitrationlowcap "
            "portinfo.vlcap portinfo.vlhighlimit portinfo.vlstallcount rmpp.rmppflags rmpp.rmppstatus rmpp.rmpptype "
            "rmpp.rmppversion rmpp.rresptime sa.blocknum_eightbit sa.inputportnum sa.outputportnum sa.portnum "
            "sa.position sltovlmappingtable.sltovlhighbits sltovlmappingtable.sltovllowbits sminfo.priority "
            "sminfo.smstate smpdirected.hopcount smpdirected.hoppointer switchinfo.defaultmulticastnotprimaryport "
            "switchinfo.defaultmulticastprimaryport switchinfo.defaultport switchinfo.enhancedportzero "
            "switchinfo.filterrawinboundcap switchinfo.filterrawoutboundcap switchinfo.inboundenforcementcap "
            "switchinfo.lifetimevalue switchinfo.optimizedsltovlmappingprogramming switchinfo.outboundenforcementcap "
            "switchinfo.portstatechange trap.drhopcount trap.drnotice trap.drpathtruncated "
            "trap.linkspeecenabledchange trap.linkwidthenabledchange trap.method trap.nodedescriptionchange "
            "trap.otherlocalchanges trap.portno trap.sl trap.wait_for_repath vlarbitrationtable.vl "
            "vlarbitrationtable.weight"
        ),
        4: (
            "arp.proto.type classportinfo.capabilitymask classportinfo.redirectlid classportinfo.redirectpkey "
            "classportinfo.traplid classportinfo.trappkey cm.rej.reason cm.req.ip_cm.sport cm.req.pkey "
            "cm.req.serviceid.dport eth.type infiniband_link.lpcrc informinfo.lidrangebegin informinfo.lidrangeend "
            "informinfo.trapnumberdeviceid informinfo.type informinforecord.enum ip.checksum ip.id ipoib.reserved "
            "ipoib.type linkrecord.fromlid linkrecord.servicep_key linkrecord.tolid mad.attributeid mad.classspecific "
            "mad.status mcmemberrecord.mlid mcmemberrecord.p_key multicastforwardingtable.portmask "
            "multipathrecord.p_key nodeinfo.deviceid nodeinfo.partitioncap notice.issuerlid notice.noticecount "
            "notice.trapnumberdeviceid p_keytable.p_keybase pathrecord.dlid pathrecord.p_key pathrecord.sl "
            "pathrecord.slid portcounters.counterselect portcounters_ext.counterselect portinfo.diagcode portinfo.lid "
            "portinfo.m_keyleaseperiod portinfo.m_keyviolations portinfo.mastersmlid portinfo.maxcredithint "
            "portinfo.p_keyviolations portinfo.q_keyviolations rwh.etype sa.attributeoffset sa.blocknum_ninebit "
            "sa.blocknum_sixteenbit sa.endportlid sa.lid sll.etype smpdirected.drdlid smpdirected.drslid "
            "smpdirected.smpstatus switchinfo.lidsperport switchinfo.linearfdbcap switchinfo.linearfdbtop "
            "switchinfo.multicastfdbcap switchinfo.partitionenforcementcap switchinfo.randomfdbcap tcp.flags "
            "trap.attributeid trap.drslid trap.lidaddr trap.lidaddr1 trap.lidaddr2 trap.pkey udp.checksum variant.crc "
            "vlan.etype"
        ),
        6: (
            "bth.destqp classportinfo.redirectfl classportinfo.redirectqp classportinfo.trapfl classportinfo.trapqp "
            "cm.rep.localeecn cm.rep.localqpn cm.rep.startpsn cm.req.localeecn cm.req.localqpn cm.req.remoteeecn "
            "cm.req.remoteqpneecn cm.req.startpsn informinfo.producertypevendorid informinfo.qpn ipv6.flow "
            "mcmemberrecord.flowlabel multipathrecord.flowlabel nodeinfo.vendorid notice.producertypevendorid "
            "pathrecord.flowlabel portinfo.linkroundtriplatency trap.qp1 trap.qp2"
        ),
        8: (
            "classportinfo.capabilitymask2 classportinfo.redirectqkey classportinfo.trapqkey cm.dreq.localcommid "
            "cm.dreq.remotecommid cm.drsp.localcommid cm.drsp.remotecommid cm.rej.localcommid cm.rej.remotecommid "
            "cm.rep cm.rep.localqkey cm.rep.remotecommid cm.req cm.req.alt_flowlabel cm.req.alt_pktrate "
            "cm.req.alt_reserved0 cm.req.localqkey cm.req.prim_flowlabel cm.req.prim_pktrate cm.req.prim_reserved0 "
            "cm.rtu.localcommid cm.rtu.remotecommid deth.srcqp invariant.crc ipv6.tclass linkrecord.servicelease "
            "mad.attributemodifier mcmemberrecord.q_key nodeinfo.revision portinfo.capabilitymask reth.r_key "
            "rmpp.data1 rmpp.data2 rmpp.newwindowlast rmpp.payloadlength rmpp.segmentnumber sminfo.actcount "
            "trap.attributemodifier trap.capabilitymask trap.key"
        ),
        16: (
            "cm.rep.localcaguid cm.req.localcaguid cm.req.serviceid deth.q_key linkrecord.serviceid mad.transactionid "
            "nodeinfo.nodeguid nodeinfo.portguid nodeinfo.systemimageguid portinfo.guid portinfo.m_key reth.va "
            "sa.componentmask sa.smkey sminfo.guid sminfo.sm_key smpdirected.d smplid.mkey trap.comp_mask trap.mkey "
            "trap.systemimageguid"
        ),
    }.items()
    for name in names.split()
}

TSHARK_DISPLAY.update(
    {
        "macc.opcode": 4,
        "macc.cbfc.enbv": 4,
        "lldp.unknown_subtype.content": -1,
        "lldp.ieee.802_1.proto.id": -1,
        **{f"lldp.{k}": n for k, n in LLDP_DISPLAY.items()},
        "lldp.ieee.802_1.subtype": 2,
        "lldp.ieee.802_3.subtype": 2,
        "lldp.tlv.system_cap": 4,
        "lldp.tlv.enable_system_cap": 4,
        **{f"lldp.tlv.{w}system_cap.{c}": 1 for w in ("", "enable_") for c in LLDP_CAPABILITIES},
        "lldp.mgn.addr.hex": -1,
        "lldp.dcbx.feature.pg.reserved": 2,
        "lldp.dcbx.ieee.app.reserved": 2,
        "lldp.dcbx.feature.app.proto": 4,
        **{f"lldp.ieee.{k}": 4 if k.endswith("caps") else 2 for k in LLDP_ORG_FLAGS},
        **{f"lldp.ieee.{k}.{bit}": 1 for k, bits in LLDP_ORG_FLAGS.items() for bit, m in bits if m & (m - 1) == 0},
        **{f"lldp.ieee.802_3.pmd_auto_neg_advertised_caps_inv.{c}": 1 for c in PMD_CAPABILITIES},
        "lldp.ieee.802_3.pmd_mau_type": 4,
        "lldp.dcbx.ieee.willing": 1,
        "lldp.dcbx.ieee.ets.cbs": 1,
        "lldp.dcbx.ieee.pfc.mbc": 1,
        "lldp.dcbx.proto": 2,
        "lldp.dcbx.version": 2,
        "lldp.dcbx.max_version": 2,
        "lldp.dcbx.feature.subtype": 2,
        "lldp.dcbx.feature.pg.numtcs": 2,
        "lldp.dcbx.feature.pfc.numtcs": 2,
        "lldp.dcbx.feature.app.oui": 6,
        "lldp.dcbx.feature.enabled": 1,
        "lldp.dcbx.feature.willing": 1,
        "lldp.dcbx.feature.error": 1,
        **{f"macc.cbfc.enbv.c{p}": 1 for p in range(8)},
        **{f"lldp.dcbx.feature.pfc.prio{p}": 1 for p in range(8)},
    }
)


def _nvme_display():
    from dissectors.nvmetable import DISPLAY

    return DISPLAY


# PortInfo's CapabilityMask bits: tshark shows each shifted down, as hex of the 32-bit word (`0x00000001`)
TSHARK_DISPLAY.update({f"portinfo.capabilitymask.{name}": 8 for name, _ in CAPABILITY_MASK})
TSHARK_DISPLAY.update(_nvme_display())  # tshark 4.4's NVMe-oF fields (dissectors.nvmetable)
TSHARK_DISPLAY.update(_iser("DISPLAY"))  # tshark 4.4's iSER, iSCSI and SCSI fields (dissectors.iscsitable)
TSHARK_DISPLAY.update(_rpcrdma("DISPLAY"))  # NFS-over-RDMA fields (dissectors.rpcrdmatable, rpcrdmav2)
TSHARK_DISPLAY.update(_smbdirect("DISPLAY"))  # tshark 4.4's SMB Direct and SMB2 fields
HEX_DIGITS = {name: digits for name, digits in TSHARK_DISPLAY.items() if digits > 1}


# Widths in bits of the record fields narrower than their storage (IBA §9.2-9.3, IEEE 802.1Q, RFC 3168).
NARROW = {
    "bth.psn": 24,
    "bth.destqp": 24,
    "aeth.msn": 24,
    "deth.srcqp": 24,
    "xrceth.xrcsrq": 24,
    "bth.padcnt": 2,
    "bth.tver": 4,
    "lrh.sl": 4,
    "lrh.vl": 4,
    "vlan.id": 12,
    "ip.dsfield.ecn": 2,
    "ipv6.tclass.ecn": 2,
}

# PortInfo's CapabilityMask bits are FT_UINT32 in tshark 4.0 and the flag words' FT_UINT8: a literal too big for
# them is refused, as tshark refuses it
NARROW.update({f"portinfo.capabilitymask.{name}": 32 for name, _ in CAPABILITY_MASK})
NARROW.update(FLAG_WIDTHS)


def max_value(key: str) -> Optional[int]:
    """The largest value an unsigned field can hold, when ibwire knows its width without scapy."""
    if key in NARROW:
        return (1 << NARROW[key]) - 1
    from ibwire.decode.records import KEY_FIELDS, RECORD

    col = KEY_FIELDS.get(key)
    if col is not None and RECORD[col].kind == "u":
        return (1 << (8 * RECORD[col].itemsize)) - 1
    return None


WIDE = set()  # 64-bit fields (filled with layer_fields()): JSON writes them as "0x…" strings
WIDTH: Dict[str, int] = {}  # bytes of each whole-byte layer field (filled with layer_fields()): their hex width


@lru_cache(maxsize=1)
def layer_fields() -> Dict[str, str]:
    """Name -> type of every field and protocol the scapy layers define (loads scapy)."""
    return layer_field_types()


# The tcp.* and icmp.* fields of tshark's document (ibwire.decode.docfields): Wireshark type -> the filter's kind
DOC_KINDS = {"NONE": PROTO, "PROTOCOL": PROTO, "BYTES": BYTES, "IPv4": IPV4, "STRING": STRING, "DOUBLE": FLOAT}
DOC_KINDS.update({"RELATIVE_TIME": FLOAT, "ABSOLUTE_TIME": STRING, "INT32": INT})


def field_type(key: str, load: bool = True) -> Optional[str]:
    """The type of a field or protocol name (without `infiniband.`), None when ibwire does not know it.
    With load=False only names known without scapy are answered."""
    if key in ENCAP:
        return ENCAP[key]
    if key in DOC_TYPES:
        return DOC_KINDS.get(DOC_TYPES[key], UINT)
    rec = record_types()
    if key in rec:
        return rec[key]
    return layer_fields().get(key) if load else None


@lru_cache(maxsize=1)
def record_types() -> Dict[str, str]:
    """Name -> type of the fields the compiled records hold (ibwire.decode.records.FIELD_KEYS)."""
    from ibwire.decode.records import FIELD_KEYS, RECORD

    out = {}
    for col, key in FIELD_KEYS.items():
        kind = RECORD[col].kind
        if key.startswith("addr.") or key in ENCAP:
            continue
        out[key] = UINT if kind in "ui" else FLOAT if kind == "f" else BYTES
    out.update({"grh.sgid": IPV6, "grh.dgid": IPV6})
    from ibwire.decode.records import ANALYSIS

    out["bth.analysis"] = PROTO
    out.update({key: {"span": FLOAT, "cause": STRING}.get(kind, UINT) for key, kind in ANALYSIS.values()})
    for key in list(out):
        out.setdefault(key.split(".")[0], PROTO)
    return out


def known_names():
    return sorted(set(ENCAP) | set(record_types()) | set(layer_fields()))


def _scapy_type(field) -> str:
    from scapy.fields import (
        IP6Field,
        IPField,
        MACField,
        SignedByteField,
        SignedIntField,
        SignedLongField,
        SignedShortField,
        StrField,
    )

    while hasattr(field, "fld"):  # conditional / multiple-type wrappers
        field = field.fld
    if isinstance(field, IP6Field):
        return IPV6
    if isinstance(field, IPField):
        return IPV4
    if isinstance(field, MACField):
        return MAC
    if type(field).__name__ == "TextField":
        return STRING
    if isinstance(field, StrField):
        return BYTES
    if isinstance(field, (SignedByteField, SignedShortField, SignedIntField, SignedLongField)):
        return INT
    return UINT


def layer_field_types() -> dict:
    """Name -> type of every protocol and field the scapy layers of dissectors/ give a Wireshark name."""
    import importlib
    import pkgutil

    from scapy.fields import PacketField, PacketListField
    from scapy.packet import Packet

    import dissectors
    import dissectors.mad

    for pkg in (dissectors, dissectors.mad):
        for m in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{m.name}")
    out = {}
    todo = [Packet]
    seen = set()
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
        ws = getattr(cls, "ws_name", "") if cls.__module__.startswith("dissectors") else ""
        if not ws:
            continue
        out.setdefault(ws, PROTO)
        alias = getattr(cls, "ws_alias", {}) or {}
        for f in cls.fields_desc:
            if f.name.startswith("_") or isinstance(f, (PacketField, PacketListField)):
                continue
            ftype = _scapy_type(f)
            wide = getattr(f, "sz", 0) == 8 or getattr(f, "size", 0) == 64
            bits = f.size if hasattr(f, "size") and isinstance(f.size, int) else 8 * getattr(f, "sz", 0)
            for key in (f"{ws}.{f.name}", alias.get(f.name)):
                if key:
                    out.setdefault(key, ftype)
                    if bits and bits % 8 == 0:
                        WIDTH.setdefault(key, bits // 8)
                    if wide and ftype == UINT:
                        WIDE.add(key)
        extra = {}
        for probe in getattr(cls, "ws_probes", ({},)) if hasattr(cls, "ws_extra") else ():
            try:  # each probe (field values) shows the extra fields of one case
                extra.update(cls(**probe).ws_extra())
            except Exception:
                pass
        for word, bits in getattr(cls, "ws_bits", {}).items():  # a flag word's bits, shown 0/1 like Wireshark
            out.update({f"{ws}.{word}.{bit}": UINT for bit, _ in bits})
        for name, value in extra.items():
            value = value[0] if isinstance(value, list) else value  # a repeated field (NVMe structure entries)
            out.setdefault(
                f"{ws}.{name}", STRING if isinstance(value, str) else BYTES if isinstance(value, bytes) else UINT
            )
    for key in list(out):  # "cm.req.ip_cm" -> "cm", "cm.req" are protocols too
        parts = key.split(".")
        for i in range(1, len(parts)):
            out.setdefault(".".join(parts[:i]), PROTO)
    return out
