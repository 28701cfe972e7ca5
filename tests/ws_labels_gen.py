"""Writes ibwire/report/packets/ws_labels.py, the labels `-V` prints, from Wireshark's own field registrations.

    python tests/ws_labels_gen.py > ibwire/report/packets/ws_labels.py

Reads `tshark -G fields` (label, type, base, bitmask of each field) and `tshark -G values` (value strings,
true/false strings) for every InfiniBand field and the encapsulation fields ibwire's tshark-shaped document
holds (ibwire.report.packets.tshark_doc).  test_tree_labels.py regenerates it and requires the committed table equal.
"""

import subprocess
import sys

from dissectors.smb2table import COMMANDS
from dissectors.smbdirecttable import NT_STATUS

OTHER = set(
    """
frame.interface_id frame.interface_name frame.interface_description frame.encap_type frame.time frame.offset_shift
frame.time_epoch frame.time_delta frame.time_delta_displayed frame.time_relative frame.number frame.len
frame.cap_len frame.marked frame.ignored frame.protocols
erf.ts erf.types erf.types.type erf.types.ext_header erf.flags erf.flags.cap erf.flags.vlen erf.flags.trunc
erf.flags.rxe erf.flags.dse erf.flags.res erf.rlen erf.lctr erf.wlen
eth.dst eth.src eth.type eth.addr eth.dst_resolved eth.src_resolved eth.dst.oui eth.src.oui eth.addr_resolved
eth.addr.oui eth.dst.lg eth.src.lg eth.lg eth.dst.ig eth.src.ig eth.ig
vlan.priority vlan.dei vlan.id vlan.etype
ip.version ip.hdr_len ip.dsfield ip.dsfield.dscp ip.dsfield.ecn ip.len ip.id ip.flags ip.flags.rb ip.flags.df
ip.flags.mf ip.frag_offset ip.ttl ip.proto ip.checksum ip.checksum.status ip.src ip.dst ip.addr ip.src_host
ip.dst_host ip.host
ipv6.version ipv6.tclass ipv6.tclass.dscp ipv6.tclass.ecn ipv6.flow ipv6.plen ipv6.nxt ipv6.hlim ipv6.src
ipv6.dst ipv6.addr ipv6.src_host ipv6.dst_host ipv6.host
udp.srcport udp.dstport udp.port udp.length udp.checksum udp.checksum.status udp.stream udp.time_relative
udp.time_delta udp.payload data.data data.len
""".split()
)
# Of long value tables, the values ibwire's captures can hold (EtherTypes, IP protocols, encapsulations).
SOME = {
    "eth.type": {0x0800, 0x86DD, 0x8100, 0x8915, 0x88CC, 0x8808, 0x0806},
    "vlan.etype": {0x0800, 0x86DD, 0x8100, 0x8915, 0x88CC, 0x8808, 0x0806},
    "ip.proto": {0, 1, 6, 17, 58},
    "ipv6.nxt": {0, 1, 6, 17, 58},
    "arp.proto.type": {0x0800, 0x86DD},
    "frame.encap_type": {1, 25, 98, 180, 210},
    "scsi.sns.errtype": {0x70, 0x72},  # current errors (fixed, descriptor format): what iSCSI sense data holds
}

SOME.update(dict.fromkeys(("smb2.nt_status", "smb_direct.status"), set(NT_STATUS)))  # the NT statuses ibwire names
SOME["smb2.cmd"] = set(range(len(COMMANDS)))  # the commands MS-SMB2 defines (tshark names the others unknown-0x..)

# Fields with several tables of names, one chosen by a preference: the one tshark uses by default
# (VLAN priorities: IEEE 802.1Q-2014's eight classes).
TABLE = {"vlan.priority": 1}


# OUIs an LLDP TLV carries in RoCE fabrics (IEEE 802.1 and 802.3, TIA TR-41, Intel's CEE DCBX, the ConnectX
# NICs' Mellanox): tshark names them from Wireshark's manuf file (its long name, else its short one).
OUIS = (0x0080C2, 0x00120F, 0x0012BB, 0x001B21, 0x0002C9)


def oui_names() -> dict:
    folder = next(
        line.split("\t")[-1]
        for line in tshark("-G", "folders").splitlines()
        if line.startswith("Global configuration:")
    )
    names = {}
    with open(f"{folder}/manuf", encoding="utf-8") as manuf:
        for line in manuf:
            p = line.split("#")[0].rstrip("\n").split("\t")
            if len(p) >= 2 and len(p[0]) == 8 and int(p[0].replace(":", ""), 16) in OUIS:
                names[int(p[0].replace(":", ""), 16)] = (p[2] if len(p) > 2 and p[2].strip() else p[1]).strip()
    return names


# Protocols beside InfiniBand that ibwire decodes (DCB, NVMe-oF, NFS over RDMA, iSER): the fields ibwire knows of them.
BESIDE = ("lldp.", "macc.", "nvme.", "nvme-rdma.", "rpcordma.", "rpc.", "nfs.", "iser.", "iscsi.", "scsi.", "scsi_sbc.")

BESIDE += ("smb_direct.", "smb2.")  # SMB Direct and the SMB2 it carries
BESIDE += ("arp.",)  # ARP, IPoIB's and Ethernet's


def wanted(name: str) -> bool:
    if name.startswith(BESIDE):
        from ibwire.decode.fieldtypes import field_type

        return field_type(name) is not None
    return name.startswith("infiniband.") or name in OTHER


def tshark(*args) -> str:
    return subprocess.run(["tshark", *args], capture_output=True, text=True, check=True).stdout


def main() -> None:
    fields, values, tfs, tables = {}, {}, {}, {}
    for line in tshark("-G", "fields").splitlines():
        p = line.split("\t")
        if p[0] == "F" and wanted(p[2]):
            fields.setdefault(p[2], (p[1], p[3], p[5], int(p[6], 16)))
    for line in tshark("-G", "values").splitlines():
        p = line.split("\t")
        if len(p) >= 4 and p[0] in ("V", "V64") and p[1] in fields:
            value = int(p[2], 0)
            seen = tables.setdefault(p[1], [set()])
            if value in seen[-1]:  # the field's next table of names begins
                seen.append(set())
            seen[-1].add(value)
            if len(seen) - 1 == TABLE.get(p[1], 0) and (p[1] not in SOME or value in SOME[p[1]]):
                values.setdefault(p[1], {})[value] = p[3]
        elif len(p) >= 4 and p[0] == "T" and p[1] in fields:
            tfs[p[1]] = (p[2], p[3])
    out = sys.stdout
    out.write(
        '"""Wireshark\'s labels of the fields `-V` shows: generated by tests/ws_labels_gen.py from\n'
        f"`tshark -G fields` and `tshark -G values` ({tshark('-v').splitlines()[0]}); do not edit.\n\n"
        "FIELDS: name -> (label, type, base, bitmask); VALUES: name -> {value: string};\n"
        'TFS: name -> (text when true, text when false); OUIS: OUI -> organisation (manuf).\n"""\n'
    )
    out.write("FIELDS = {\n")
    for name in sorted(fields):
        out.write(f"    {name!r}: {fields[name]!r},\n")
    out.write("}\n\nVALUES = {\n")
    first, same = {}, []  # a table equal to an earlier one is written once, then shared
    for name in sorted(values):
        table = tuple(sorted(values[name].items()))
        if table in first:
            same.append((name, first[table]))
            continue
        first[table] = name
        out.write(f"    {name!r}: {{\n")
        for v, text in table:
            out.write(f"        {v}: {text!r},\n")
        out.write("    },\n")
    out.write("}\n")
    for name, earlier in same:
        out.write(f"VALUES[{name!r}] = VALUES[{earlier!r}]\n")
    out.write("\nTFS = {\n")
    for name in sorted(tfs):
        out.write(f"    {name!r}: {tfs[name]!r},\n")
    out.write("}\n\nOUIS = {\n")
    for oui, name in sorted(oui_names().items()):
        out.write(f"    0x{oui:06X}: {name!r},\n")
    out.write("}\n")


if __name__ == "__main__":
    main()
