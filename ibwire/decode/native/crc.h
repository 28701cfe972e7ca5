/* CRCs of the InfiniBand transport: the invariant CRC (a CRC-32 over the packet with its variant fields
 * set to ones) and the variant CRC of native IB links (a CRC-16 over the whole LRH-to-ICRC packet). */
#ifndef IBWIRE_CRC_H
#define IBWIRE_CRC_H
#include <stddef.h>
#include <stdint.h>

/* Absolute buffer offsets of the headers whose variant fields the ICRC masks, -1 where absent. */
typedef struct {
    int64_t start, end;   /* the covered span: buf[start:end] (the ICRC itself starts at end) */
    int64_t lrh_vl;       /* an LRH whose VL (high nibble of byte 0) is variant: local IB packets */
    int64_t ones8;        /* 8 bytes replaced by ones: the LRH of routed IB, RoCE's pseudo-LRH */
    int64_t grh;          /* a GRH or IPv6 header: TClass low nibble, TClass/flow label, hop limit */
    int64_t ip4;          /* an IPv4 header: DSCP/ECN, TTL, header checksum */
    int64_t udp;          /* a UDP header: checksum */
    int64_t bth;          /* the BTH: resv8a (byte 4) */
} icrc_span;

void crc_init(void);
uint32_t crc32_any(uint32_t crc, const uint8_t *p, size_t len);      /* zlib's crc32() contract */
uint32_t icrc_of(const uint8_t *buf, int64_t size, const icrc_span *s);
void vcrc_slices(const uint16_t table[256], uint16_t out[4][256]);    /* the byte table -> vcrc_of's tables */
uint16_t vcrc_of(const uint8_t *buf, int64_t size, int64_t start, int64_t end, const uint16_t t[4][256]);

#endif
