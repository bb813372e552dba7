/*
 * The cross-run output cache: node signature -> the node's output values and UI
 * result. Values are refcounted, so handing a cached output to a consumer is a
 * reference, never a copy, and eviction only drops the cache's reference.
 *
 * Signatures are 128-bit hashes of the node's class, IS_CHANGED fingerprint,
 * constant inputs and its sources' signatures (a Merkle hash, which is equivalent
 * to ComfyUI's "inputs + every ancestor's inputs" key: renumbering keeps it,
 * changing anything upstream changes it). A 128-bit collision would need about
 * 2^64 distinct nodes, so the hash stands for the key.
 */
#include <string.h>

#include "alloc.h"
#include "graph_internal.h"

#define TOMB ((struct gcache_entry *)1)

static inline uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

void ghash_init(struct ghash *h)
{
    h->a = 0x243f6a8885a308d3ull;
    h->b = 0x13198a2e03707344ull;
}

void ghash_u64(struct ghash *h, uint64_t x)
{
    h->a = rotl(h->a ^ (x * 0x9e3779b97f4a7c15ull), 31) * 0xbf58476d1ce4e5b9ull;
    h->b = rotl(h->b + x, 27) * 0x94d049bb133111ebull ^ (h->a >> 17);
}

void ghash_bytes(struct ghash *h, const void *p, size_t n)
{
    const unsigned char *c = p;
    ghash_u64(h, n);
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, c, 8);
        ghash_u64(h, x);
        c += 8;
        n -= 8;
    }
    if (n) {
        uint64_t x = 0;
        memcpy(&x, c, n);
        ghash_u64(h, x);
    }
}

void ghash_str(struct ghash *h, const char *s)
{
    ghash_bytes(h, s, strlen(s));
}

struct gsig ghash_final(const struct ghash *h)
{
    uint64_t a = h->a, b = h->b;
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdull;
    a ^= b;
    a ^= a >> 33;
    b ^= b >> 29;
    b *= 0xc4ceb9fe1a85ec53ull;
    b ^= a;
    b ^= b >> 32;
    return (struct gsig){a, b};
}

void gcache_init(struct gcache *c)
{
    memset(c, 0, sizeof(*c));
}

static void entry_free(struct gcache_entry *e)
{
    for (int i = 0; i < e->n_out; i++)
        value_unref(e->out[i]);
    cJSON_Delete(e->ui);
    xfree(e);
}

void gcache_clear(struct gcache *c)
{
    for (size_t i = 0; i < c->nslots; i++)
        if (c->e[i] && c->e[i] != TOMB)
            entry_free(c->e[i]);
    if (c->e)
        memset(c->e, 0, c->nslots * sizeof(*c->e));
    c->count = c->tombs = 0;
}

void gcache_release(struct gcache *c)
{
    gcache_clear(c);
    xfree(c->e);
    memset(c, 0, sizeof(*c));
}

static size_t slot_of(struct gsig s, size_t nslots)
{
    return (size_t)(s.a ^ (s.b >> 7)) & (nslots - 1);
}

struct gcache_entry *gcache_get(struct gcache *c, struct gsig sig)
{
    if (!c->nslots)
        return NULL;
    size_t mask = c->nslots - 1;
    for (size_t s = slot_of(sig, c->nslots); c->e[s]; s = (s + 1) & mask) {
        struct gcache_entry *e = c->e[s];
        if (e != TOMB && e->sig.a == sig.a && e->sig.b == sig.b)
            return e;
    }
    return NULL;
}

static void rehash(struct gcache *c, size_t nslots)
{
    struct gcache_entry **old = c->e;
    size_t on = c->nslots;
    c->e = xcalloc(nslots, sizeof(*c->e));
    c->nslots = nslots;
    c->tombs = 0;
    for (size_t i = 0; i < on; i++) {
        struct gcache_entry *e = old[i];
        if (!e || e == TOMB)
            continue;
        size_t s = slot_of(e->sig, nslots);
        while (c->e[s])
            s = (s + 1) & (nslots - 1);
        c->e[s] = e;
    }
    xfree(old);
}

void gcache_remove(struct gcache *c, struct gsig sig)
{
    if (!c->nslots)
        return;
    size_t mask = c->nslots - 1;
    for (size_t s = slot_of(sig, c->nslots); c->e[s]; s = (s + 1) & mask) {
        struct gcache_entry *e = c->e[s];
        if (e != TOMB && e->sig.a == sig.a && e->sig.b == sig.b) {
            entry_free(e);
            c->e[s] = TOMB;
            c->count--;
            c->tombs++;
            return;
        }
    }
}

struct gcache_entry *gcache_put(struct gcache *c, struct gsig sig, int n_out, struct value **out,
                                cJSON *ui)
{
    gcache_remove(c, sig);
    if (2 * (c->count + c->tombs + 1) > c->nslots)
        rehash(c, c->nslots ? (2 * c->count + 2 > c->nslots ? 2 * c->nslots : c->nslots) : 64);
    struct gcache_entry *e = xcalloc(1, sizeof(*e) + (size_t)n_out * sizeof(e->_outv[0]));
    e->sig = sig;
    e->n_out = n_out;
    e->out = e->_outv;
    if (n_out)
        memcpy(e->out, out, (size_t)n_out * sizeof(*out));
    xfree(out);
    e->ui = ui;
    size_t s = slot_of(sig, c->nslots);
    while (c->e[s] && c->e[s] != TOMB)
        s = (s + 1) & (c->nslots - 1);
    if (c->e[s] == TOMB)
        c->tombs--;
    c->e[s] = e;
    c->count++;
    return e;
}

void gcache_filter(struct gcache *c, int (*drop)(struct gcache_entry *e, void *u), void *u)
{
    for (size_t i = 0; i < c->nslots; i++) {
        struct gcache_entry *e = c->e[i];
        if (!e || e == TOMB || !drop(e, u))
            continue;
        entry_free(e);
        c->e[i] = TOMB;
        c->count--;
        c->tombs++;
    }
}
