"""The protocol numbers ibwire reads and writes, each declared once: ethertypes, UDP/TCP ports, capture-file
link types, InfiniBand's well-known QPs, Q_Keys, P_Keys and LIDs.  The tables of names live beside it
(dissectors.opcodes: BTH opcodes; dissectors.mad.table: MAD classes, methods, attributes, status;
dissectors.nvmetable: NVMe-oF), and the compiled decoder receives these values from Python
(ibwire.decode.batch).  tests/test_house_literals.py fails when one is written as a literal elsewhere.
"""

# Ethertypes (IEEE 802 registry)
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100  # IEEE 802.1Q C-tag
ETHERTYPE_QINQ = 0x88A8  # IEEE 802.1ad S-tag
ETHERTYPE_QINQ_OLD = 0x9100  # pre-standard double tagging, still sent by some switches
VLAN_TPIDS = (ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD)
ETHERTYPE_ROCE_V1 = 0x8915  # RoCE v1, IBA annex A16
ETHERTYPE_MAC_CONTROL = 0x8808  # PAUSE and PFC, IEEE 802.3 annex 31B / 802.1Qbb
ETHERTYPE_SLOW = 0x8809  # LACP, OAM, IEEE 802.3 annex 43B
ETHERTYPE_LLDP = 0x88CC  # IEEE 802.1AB

# MAC control opcodes (after ethertype 0x8808)
MACC_OPCODE_PAUSE = 0x0001  # 802.3x PAUSE, IEEE 802.3 annex 31B
MACC_OPCODE_PFC = 0x0101  # priority-based flow control, IEEE 802.1Qbb §36.1.3

# UDP and TCP ports (IANA), and the RDMA-CM service IDs' ports of the storage protocols
ROCE_V2_PORT = 4791  # RoCE v2, IBA annex A17
NVME_PORT = 4420  # NVMe over Fabrics ("nvme")
ISCSI_PORT = 3260  # iSCSI, so iSER
NFS_RDMA_PORT = 20049  # NFS over RDMA, RFC 8267
SMB_DIRECT_PORT = 445  # SMB over RDMA (SMB Direct), MS-SMBD §2.1 (Microsoft-DS)
SMB_DIRECT_PORT_IWARP = 5445  # SMB Direct's iWARP port, MS-SMBD §2.1

# pcap / pcapng link types (tcpdump.org LINKTYPE_ values)
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_ERF = 197
LINKTYPE_IPOIB = 242
LINKTYPE_INFINIBAND = 247
LINKTYPE_LINUX_SLL2 = 276

# InfiniBand
MANAGEMENT_QPS = (0, 1)  # QP0 (SMI) and QP1 (GSI), IBA §3.9.5 / §13.4
GSI_QKEY = 0x80010000  # the well-known Q_Key of QP1, IBA §13.5.1.1
IPOIB_QKEY = 0x0B1B  # the IPoIB broadcast group's Q_Key as opensm sets it
PKEY_FULL_MEMBER = 0x8000  # P_Key bit 15: full membership, IBA §10.9.1.2
PKEY_BASE = 0x7FFF  # the 15 bits naming a partition
DEFAULT_PKEY_BASE = 0x7FFF  # the default partition (base), IBA §10.9.1.1
DEFAULT_PKEY = PKEY_FULL_MEMBER | DEFAULT_PKEY_BASE  # the default partition, full member
PERMISSIVE_LID = 0xFFFF  # IBA §4.1.1
MAD_HEADER_LEN = 24  # the common MAD header, IBA §13.4.3
