/* Following record and block lengths through a chunk of a capture file: pcap(5) and pcapng
 * (draft-ietf-opsawg-pcapng).  The chain of lengths is sequential; everything after it is batched. */
#ifndef IBWIRE_WALK_H
#define IBWIRE_WALK_H
#include <stdint.h>

/* files/formats.py's MAX_PACKET and MAX_BLOCK (tshark's: wiretap/wtap.h WTAP_MAX_PACKET_SIZE_STANDARD,
 * wiretap/pcapng.c MAX_BLOCK_SIZE in Wireshark 4.0): a longer record or block is damage */
#define MAX_PACKET 262144u
#define MAX_BLOCK (16u << 20)
enum { WALK_FULL = 0, WALK_NEED = 1, WALK_DAMAGED = 2, WALK_META = 3 };

/* One walk over the chunk p[0:size] from byte `off`, which the walk leaves where the next record (block)
 * starts; it finds at most `max` records (blocks), `n` of them. */
typedef struct {
    const uint8_t *p;
    int64_t size, off;
    int big;              /* the byte order (pcapng: the current section's) */
    int64_t *out;         /* [max] their offsets */
    uint8_t *types;       /* pcapng: [max] their block types */
    int64_t *hdr;         /* [4 * max] (pcap), [6 * max] (pcapng) header words */
    int64_t max, n;
} walk_job;

/* pcap: offsets of whole records, and the four words of each record header (seconds, fraction, captured
 * and original length) in hdr[4 * i ...]; stops when `max` are found (FULL), the next record does not fit
 * in the chunk (NEED) or its captured length is impossible (DAMAGED). */
int walk_pcap_records(walk_job *w);

/* pcapng: offsets of whole Enhanced (type 6) and Simple (type 3) Packet Blocks, with their types and six
 * words each in hdr[6 * i ...]: the block length and the words at bytes 8, 12, 16, 20 and 24 (an EPB's
 * interface, timestamp high and low, captured and original length; an SPB's original length first; 0
 * beyond the chunk); other blocks are skipped, except that the walk stops at a Section Header, Interface
 * Description or Interface Statistics Block (META: the caller reads it; it is whole in the chunk).  `big`
 * is not changed here: the caller reads a new section's byte order from its header. */
int walk_pcapng_blocks(walk_job *w);

#endif
