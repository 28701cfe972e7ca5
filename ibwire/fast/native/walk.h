/* Following record and block lengths through a chunk of a capture file: pcap(5) and pcapng
 * (draft-ietf-opsawg-pcapng).  The chain of lengths is sequential; everything after it is batched. */
#ifndef IBWIRE_WALK_H
#define IBWIRE_WALK_H
#include <stdint.h>

/* readers/formats.py's MAX_PACKET and MAX_BLOCK (tshark's: wiretap/wtap.h WTAP_MAX_PACKET_SIZE_STANDARD,
 * wiretap/pcapng.c MAX_BLOCK_SIZE in Wireshark 4.0): a longer record or block is damage */
#define MAX_PACKET 262144u
#define MAX_BLOCK (16u << 20)
enum { WALK_FULL = 0, WALK_NEED = 1, WALK_DAMAGED = 2, WALK_META = 3 };

/* pcap: offsets of whole records from *off, and the four words of each record header (seconds,
 * fraction, captured and original length) in hdr[4 * i ...]; stops when `max` are found (FULL), the next
 * record does not fit in the chunk (NEED) or its captured length is impossible (DAMAGED); *off is then
 * where the next record starts. */
int walk_pcap_records(const uint8_t *p, int64_t size, int64_t *off, int big, int64_t *out, int64_t *hdr,
                      int64_t max, int64_t *n);

/* pcapng: offsets of whole Enhanced (type 6) and Simple (type 3) Packet Blocks, with their types and six
 * words each in hdr[6 * i ...]: the block length and the words at bytes 8, 12, 16, 20 and 24 (an EPB's
 * interface, timestamp high and low, captured and original length; an SPB's original length first; 0
 * beyond the chunk); other
 * blocks are skipped, except that the walk stops at a Section Header or Interface Description Block
 * (META: the caller reads it; it is whole in the chunk).  *big is the current section's byte order and is
 * not changed here. */
int walk_pcapng_blocks(const uint8_t *p, int64_t size, int64_t *off, int big, int64_t *out, uint8_t *types,
                       int64_t *hdr, int64_t max, int64_t *n);

#endif
