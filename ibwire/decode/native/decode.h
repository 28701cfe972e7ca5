/* One packet -> one record of ibwire.decode.records.RECORD (the numpy structured dtype is the truth for the
 * layout: Python passes each field's byte offset, checked against the types RECORD_FIELDS lists).  Field f
 * of row i is written at out + field_off[f] + i * field_step[f]: records one after another (every step the
 * record's size) or each field in a column of its own (each step the field's size). */
#ifndef IBWIRE_DECODE_H
#define IBWIRE_DECODE_H
#include <stdint.h>

/* Fields this decoder writes, in the order of field_off[]; numpy sets the others (frame, times, lengths, link
 * type; the an_* analysis columns come later). */
#define RECORD_FIELDS(X) \
    X(LINK, "link", "u1") X(FLAGS, "flags", "u1") X(VLAN, "vlan", "i4") X(ECN, "ecn", "u1") \
    X(PCP, "pcp", "u1") X(DSCP, "dscp", "u1") X(ETYPE, "etype", "u2") \
    X(ETH_SRC, "eth_src", "V6") X(ETH_DST, "eth_dst", "V6") X(SRC, "src", "V16") X(DST, "dst", "V16") \
    X(SLID, "slid", "u2") X(DLID, "dlid", "u2") X(SL, "sl", "u1") X(VL, "vl", "u1") \
    X(UDP_SRC, "udp_src", "u2") X(UDP_DST, "udp_dst", "u2") \
    X(OPCODE, "opcode", "u1") X(SE, "se", "u1") X(M, "m", "u1") X(PADCNT, "padcnt", "u1") X(TVER, "tver", "u1") \
    X(P_KEY, "p_key", "u2") X(FECN, "fecn", "u1") X(BECN, "becn", "u1") X(DESTQP, "destqp", "u4") \
    X(A, "a", "u1") X(PSN, "psn", "u4") X(PAYLEN, "paylen", "i4") \
    X(RETH_VA, "reth_va", "u8") X(RETH_R_KEY, "reth_r_key", "u4") X(RETH_DMALEN, "reth_dmalen", "u4") \
    X(AETH_SYNDROME, "aeth_syndrome", "u1") X(AETH_MSN, "aeth_msn", "u4") \
    X(DETH_Q_KEY, "deth_q_key", "u4") X(DETH_SRCQP, "deth_srcqp", "u4") \
    X(ATOMIC_VA, "atomic_va", "u8") X(ATOMIC_R_KEY, "atomic_r_key", "u4") \
    X(ATOMIC_SWAPDT, "atomic_swapdt", "u8") X(ATOMIC_CMPDT, "atomic_cmpdt", "u8") \
    X(ATOMICACK, "atomicack", "u8") X(IMMDT, "immdt", "u4") X(IETH, "ieth", "u4") X(XRCSRQ, "xrcsrq", "u4") \
    X(MAD_CLASS, "mad_class", "u1") X(MAD_CLASSVER, "mad_classver", "u1") X(MAD_METHOD, "mad_method", "u1") \
    X(MAD_STATUS, "mad_status", "u2") X(MAD_ATTRID, "mad_attrid", "u2") X(MAD_ATTRMOD, "mad_attrmod", "u4") \
    X(MAD_TID, "mad_tid", "u8") X(CM_COMM_ID, "cm_comm_id", "u4") X(CM_REMOTE_COMM_ID, "cm_remote_comm_id", "u4") \
    X(CM_QPN, "cm_qpn", "u4") X(ICRC, "icrc", "u1") X(VCRC, "vcrc", "u1") \
    X(MACC_OPCODE, "macc_opcode", "u2") X(MACC_PAUSE_TIME, "macc_pause_time", "u2") \
    X(MACC_ENBV, "macc_enbv", "u2") X(MACC_PAUSE_C0, "macc_pause_c0", "u2") X(MACC_PAUSE_C1, "macc_pause_c1", "u2") \
    X(MACC_PAUSE_C2, "macc_pause_c2", "u2") X(MACC_PAUSE_C3, "macc_pause_c3", "u2") \
    X(MACC_PAUSE_C4, "macc_pause_c4", "u2") X(MACC_PAUSE_C5, "macc_pause_c5", "u2") \
    X(MACC_PAUSE_C6, "macc_pause_c6", "u2") X(MACC_PAUSE_C7, "macc_pause_c7", "u2")

#define AS_ENUM(id, name, type) R_##id,
enum { RECORD_FIELDS(AS_ENUM) N_FIELDS };
#undef AS_ENUM

/* Extended headers whose offsets (after the 12-byte BTH, per opcode; -1 absent) come in ext_off[][256]. */
#define EXT_HEADERS(X) X(DETH, "deth") X(XRCETH, "xrceth") X(RETH, "reth") X(AETH, "aeth") \
    X(ATOMICETH, "atomiceth") X(ATOMICACKETH, "atomicacketh") X(IMMDT, "immdt") X(IETH, "ieth")
#define AS_ENUM(id, name) H_##id,
enum { EXT_HEADERS(AS_ENUM) N_EXT };
#undef AS_ENUM

/* Link kinds, CRC status codes and flag bits: the values of ibwire.decode.records (checked at import). */
enum { K_OTHER, K_ROCE1, K_ROCE2V4, K_ROCE2V6, K_IB, K_IBGRH, K_IPOIB, K_IBLINK };
enum { C_ABSENT, C_GOOD, C_BAD, C_TRUNC, C_UNCHECKED };
enum { FL_BTH = 1, FL_MALFORMED = 2, FL_TRUNCATED = 4, FL_GRH = 8, FL_MAD = 16, FL_HEURISTIC = 32, FL_IPOIB = 64 };

/* One decode() call, built once by module.c from its arguments (sizes checked there): packet i is
 * buf[data[i]:data[i] + caplen[i]] of link type linktype[i], decoded into row i of `out`. */
typedef struct {
    const uint8_t *buf;
    int64_t size;
    const int64_t *data, *caplen, *wirelen, *linktype;   /* [n] each */
    int64_t n;
    const int16_t *ext_off;      /* [N_EXT][256] */
    const int16_t *ext_len;      /* [256]: bytes of extended headers after the BTH */
    const uint8_t *known;        /* [256]: bit 0 opcode is defined, bit 1 a payload (and pad) may follow,
                                    bit 2 a SEND First/Only (its payload may be IPoIB), bit 3 its payload is a
                                    MAD when either QP is a management QP (dissectors.decisions) */
    const uint16_t (*vtable)[256];   /* VCRC tables (vcrc_slices) */
    const int64_t *field_off;    /* [N_FIELDS]: byte offset of each field in row 0 */
    const int64_t *field_step;   /* [N_FIELDS]: bytes from a field to the same field of the next row */
    uint8_t *out;
    unsigned roce2_port, roce1_ethertype;
    unsigned mad_qp_max, mad_header_len;   /* management QPs are 0..mad_qp_max; the common MAD header's size */
    int icrc;                    /* verify ICRC/VCRC */
} decode_job;

void decode_packets(const decode_job *job);

#endif
