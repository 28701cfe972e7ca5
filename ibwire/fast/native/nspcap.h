/* pcapng Enhanced Packet Blocks rewritten as nanosecond pcap records (capture's .pcap outputs). */
#ifndef IBWIRE_NSPCAP_H
#define IBWIRE_NSPCAP_H
#include <stddef.h>
#include <stdint.h>

/* Converts the run of whole EPBs that starts at buf[*off]: each becomes a pcap record (seconds, nanoseconds,
 * captured and original length, little-endian, then the packet bytes) in out.  Interface i's timestamp unit is
 * num[i]/den[i] nanoseconds per tick.  Stops before the first block that is not an EPB, is not whole in buf,
 * names an interface beyond niface, is malformed, or whose record would take out past out_cap.  Advances *off
 * past the blocks converted; returns the records written and sets *out_len. */
long nspcap_epbs(const uint8_t *buf, size_t len, size_t *off, int big_endian, const int64_t *num,
                 const int64_t *den, size_t niface, uint8_t *out, size_t out_cap, size_t *out_len);

#endif
