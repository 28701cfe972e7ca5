/* pcapng EPB (pcapng draft §4.3) -> nanosecond pcap record (pcap(5), magic 0xa1b23c4d). */
#include <string.h>
#include "nspcap.h"

#define EPB_TYPE 6u
#define EPB_HEAD 28u        /* type, length, interface, timestamp high and low, captured, original length */

static uint32_t u32(const uint8_t *p, int big)
{
    return big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
               : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

long nspcap_epbs(nspcap_job *j)
{
    const uint8_t *buf = j->buf;
    const int64_t *num = j->num, *den = j->den;
    uint8_t *out = j->out;
    size_t len = j->len, o = j->off, w = 0;
    int big = j->big_endian;
    long n = 0;
    while (o + EPB_HEAD + 4 <= len) {
        const uint8_t *b = buf + o;
        uint32_t type = u32(b, big), blen = u32(b + 4, big), iface = u32(b + 8, big);
        uint32_t caplen = u32(b + 20, big), origlen = u32(b + 24, big);
        if (type != EPB_TYPE || blen % 4 || blen < EPB_HEAD + 4 || blen > len - o || iface >= j->niface ||
            caplen > blen - EPB_HEAD - 4 || num[iface] <= 0 || den[iface] <= 0)
            break;
        if (w + 16 + caplen > j->out_cap)
            break;
        unsigned __int128 ticks = (unsigned __int128)u32(b + 12, big) << 32 | u32(b + 16, big);
        unsigned __int128 ns = ticks * (uint64_t)num[iface] / (uint64_t)den[iface];
        uint64_t sec = (uint64_t)(ns / 1000000000u);
        if (sec > UINT32_MAX)
            break;
        put32(out + w, (uint32_t)sec);
        put32(out + w + 4, (uint32_t)(ns % 1000000000u));
        put32(out + w + 8, caplen);
        put32(out + w + 12, origlen);
        memcpy(out + w + 16, b + EPB_HEAD, caplen);
        w += 16 + caplen;
        o += blen;
        n++;
    }
    j->off = o;
    j->out_len = w;
    return n;
}
