/* pcapng Enhanced Packet Blocks rewritten as nanosecond pcap records (capture's .pcap outputs). */
#ifndef IBWIRE_NSPCAP_H
#define IBWIRE_NSPCAP_H
#include <stddef.h>
#include <stdint.h>

/* One nspcap() call: the EPBs at buf[off:len] (section byte order big-endian if big_endian), interface i's
 * timestamp unit num[i]/den[i] nanoseconds per tick, into out[0:out_cap]. */
typedef struct {
    const uint8_t *buf;
    size_t len, off;        /* off: where the run starts; left past the blocks converted */
    int big_endian;
    const int64_t *num, *den;
    size_t niface;
    uint8_t *out;
    size_t out_cap, out_len;    /* out_len: the bytes written */
} nspcap_job;

/* Converts the run of whole EPBs that starts at buf[off]: each becomes a pcap record (seconds, nanoseconds,
 * captured and original length, little-endian, then the packet bytes) in out.  Stops before the first block
 * that is not an EPB, is not whole in buf, names an interface beyond niface, is malformed, has a time past
 * 32-bit seconds, or whose record would take out past out_cap.  Returns the records written. */
long nspcap_epbs(nspcap_job *job);

#endif
