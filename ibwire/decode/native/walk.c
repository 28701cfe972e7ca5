/* pcap record and pcapng block walks (see walk.h). */
#include "walk.h"

/* Each record's (block's) length word is read before the next one can be found, so a walk over bytes that
 * read() has just copied out of the page cache (not left in the CPU's caches) waits a memory round trip
 * per record.  Every cache line up to PREFETCH bytes ahead of the walk is requested early instead, so
 * those fetches overlap. */
#define PREFETCH 4096
#define LINE 64

static inline void fetch_ahead(const uint8_t *p, int64_t size, int64_t off, int64_t *ahead)
{
    int64_t until = off + PREFETCH < size ? off + PREFETCH : size;
    for (int64_t a = *ahead > off ? *ahead : off; a < until; a += LINE)
        __builtin_prefetch(p + a);
    if (until > *ahead)
        *ahead = until;
}

static inline uint32_t rd32(const uint8_t *p, int big)
{
    return big ? ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3])
               : ((uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]);
}

int walk_pcap_records(walk_job *w)
{
    const uint8_t *p = w->p;
    int64_t size = w->size, max = w->max, *out = w->out, *hdr = w->hdr;
    int big = w->big;
    int64_t off = w->off < 0 ? 0 : w->off, n = 0, ahead = off;
    int status = WALK_FULL;
    while (n < max) {
        if (off > size - 16) { status = WALK_NEED; break; }     /* so that no offset can overflow */
        fetch_ahead(p, size, off, &ahead);
        uint32_t incl = rd32(p + off + 8, big);
        if (incl > MAX_PACKET) { status = WALK_DAMAGED; break; }
        if ((int64_t)incl > size - off - 16) { status = WALK_NEED; break; }
        int64_t *h = hdr + 4 * n;        /* the header's line is in cache now: its other words cost nothing */
        h[0] = rd32(p + off, big);
        h[1] = rd32(p + off + 4, big);
        h[2] = incl;
        h[3] = rd32(p + off + 12, big);
        out[n++] = off;
        off += 16 + incl;
    }
    w->off = off;
    w->n = n;
    return status;
}

#define SHB 0x0A0D0D0Au
#define BYTE_ORDER_MAGIC 0x1A2B3C4Du

int walk_pcapng_blocks(walk_job *w)
{
    const uint8_t *p = w->p;
    int64_t size = w->size, max = w->max, *out = w->out, *hdr = w->hdr;
    uint8_t *types = w->types;
    int big = w->big;
    int64_t off = w->off < 0 ? 0 : w->off, n = 0, ahead = off;
    int status = WALK_FULL;
    while (n < max) {
        if (off > size - 12) { status = WALK_NEED; break; }
        fetch_ahead(p, size, off, &ahead);
        uint32_t type = rd32(p + off, big);
        int order = big;
        if (type == SHB)                         /* a new section may change the byte order */
            order = rd32(p + off + 8, 0) == BYTE_ORDER_MAGIC ? 0 : 1;
        uint32_t len = rd32(p + off + 4, order);
        if (len < 12 || len % 4 || len > MAX_BLOCK) { status = WALK_DAMAGED; break; }
        if ((int64_t)len > size - off) { status = WALK_NEED; break; }
        if (type == SHB || type == 1 || type == 5) { status = WALK_META; break; }   /* 5: statistics */
        if (type == 6 || type == 3) {
            int64_t *h = hdr + 6 * n;
            h[0] = len;
            for (int k = 1; k < 6; k++)          /* the words at bytes 8, 12, ... 24 that lie in the chunk */
                h[k] = off + 4 + 4 * k <= size - 4 ? rd32(p + off + 4 + 4 * k, order) : 0;
            types[n] = (uint8_t)type;
            out[n++] = off;
        }
        off += len;
    }
    w->off = off;
    w->n = n;
    return status;
}
