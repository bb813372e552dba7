/*
 * CLIP BPE tokenizer (sd15.md §2.1-2.5). See clip_tokenizer.h.
 */
#include "clip_tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "strhash.h"
#include "utf8.h"
#include "clip_tokenizer_impl.h"
#include "clip_unicode_tables.h"
#include "log.h"

#ifndef LATENTD_TOKENIZER_DIR
#define LATENTD_TOKENIZER_DIR "models/data/sd1_tokenizer"
#endif

/* ---- a small open-addressing hash map (string -> int, or u64 -> int) --------------------- */

struct smap_slot {
    char *key; /* owned; NULL = empty */
    int val;
};

struct smap {
    struct smap_slot *slots;
    size_t cap, n; /* cap: power of two */
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    uint64_t h = strhash_bytes(p, n);
    return h ^ (h >> 29); /* FNV's low bits are weak; the table masks them */
}

static void smap_init(struct smap *m, size_t expect)
{
    m->cap = 16;
    while (m->cap < 2 * expect)
        m->cap *= 2;
    m->slots = xcalloc(m->cap, sizeof(*m->slots));
    m->n = 0;
}

static void smap_release(struct smap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        xfree(m->slots[i].key);
    xfree(m->slots);
    m->slots = NULL;
}

static int smap_get(const struct smap *m, const char *key, int dflt)
{
    size_t mask = m->cap - 1, i = hash_bytes(key, strlen(key)) & mask;
    for (; m->slots[i].key; i = (i + 1) & mask)
        if (strcmp(m->slots[i].key, key) == 0)
            return m->slots[i].val;
    return dflt;
}

static void smap_put(struct smap *m, const char *key, int val)
{
    ASSERT(m->n * 2 < m->cap);
    size_t mask = m->cap - 1, i = hash_bytes(key, strlen(key)) & mask;
    for (; m->slots[i].key; i = (i + 1) & mask) {
        if (strcmp(m->slots[i].key, key) == 0) {
            m->slots[i].val = val;
            return;
        }
    }
    m->slots[i].key = xstrdup(key);
    m->slots[i].val = val;
    m->n++;
}

/* Merge ranks keyed by the pair of symbol ids. */
struct pmap {
    uint64_t *keys; /* (a << 32 | b) + 1; 0 = empty */
    int *vals;
    size_t cap;
};

static void pmap_init(struct pmap *m, size_t expect)
{
    m->cap = 16;
    while (m->cap < 2 * expect)
        m->cap *= 2;
    m->keys = xcalloc(m->cap, sizeof(*m->keys));
    m->vals = xcalloc(m->cap, sizeof(*m->vals));
}

static void pmap_put(struct pmap *m, uint32_t a, uint32_t b, int v)
{
    uint64_t k = ((uint64_t)a << 32 | b) + 1;
    size_t mask = m->cap - 1, i = hash_bytes(&k, 8) & mask;
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & mask;
    m->keys[i] = k;
    m->vals[i] = v;
}

static int pmap_get(const struct pmap *m, uint32_t a, uint32_t b)
{
    uint64_t k = ((uint64_t)a << 32 | b) + 1;
    size_t mask = m->cap - 1, i = hash_bytes(&k, 8) & mask;
    for (; m->keys[i]; i = (i + 1) & mask)
        if (m->keys[i] == k)
            return m->vals[i];
    return -1;
}

/* ---- the tokenizer -------------------------------------------------------------------------- */

#define CACHE_MAX 8192 /* pre-token strings remembered; cleared when full */

struct cache_entry {
    int32_t *ids; /* owned */
    int n;
};

struct clip_tokenizer {
    struct smap vocab;          /* token string -> id */
    struct pmap ranks;          /* (id a, id b) -> merge rank; result id = 512 + rank */
    int n_vocab;
    int byte_id[256];           /* id of the byte character */
    int byte_id_w[256];         /* id of the byte character + "</w>" */
    pthread_mutex_t lock;       /* guards the cache */
    struct smap cache_idx;      /* pre-token -> index into cache */
    struct cache_entry *cache;
    int n_cache;
    char *embedding_dir;        /* owned, or NULL */
};

void clip_tokenizer_set_embedding_dir(struct clip_tokenizer *t, const char *dir)
{
    xfree(t->embedding_dir);
    t->embedding_dir = dir ? xstrdup(dir) : NULL;
}

const char *clip__embedding_dir(const struct clip_tokenizer *t)
{
    return t->embedding_dir;
}

/* §2.4: byte -> code point of its "byte character". */
static unsigned byte_char(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
        return (unsigned)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
            n++;
    return 256u + (unsigned)n;
}

static char *read_file(const char *path, size_t *len)
{
    struct buf b;
    buf_init(&b);
    if (buf_read_file(&b, path) < 0) {
        buf_release(&b);
        return NULL;
    }
    return buf_detach(&b, len);
}

static int file_exists(const char *path)
{
    return access(path, R_OK) == 0;
}

/* Pick the data directory (see the header for the order). */
static void find_dir(const char *dir, char *out, size_t size)
{
    char cand[PATH_MAX + 64], probe[PATH_MAX + 192];
    if (dir) {
        snprintf(out, size, "%s", dir);
        return;
    }
    const char *env = getenv("LATENTD_TOKENIZER_DIR");
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return;
    }
    char exe[PATH_MAX - 256];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        static const char *const rel[] = {"../share/latentd/sd1_tokenizer",
                                           "../models/data/sd1_tokenizer",
                                           "../../models/data/sd1_tokenizer"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(cand, sizeof(cand), "%s/%s", exe, rel[i]);
            snprintf(probe, sizeof(probe), "%s/vocab.json", cand);
            if (file_exists(probe)) {
                snprintf(out, size, "%s", cand);
                return;
            }
        }
    }
    snprintf(out, size, "%s", LATENTD_TOKENIZER_DIR);
}

static int load_vocab(struct clip_tokenizer *t, const char *path, struct err *e)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text)
        return err_set(e, ERR_NOT_FOUND, "cannot read tokenizer vocabulary '%s': %s", path,
                       strerror(errno));
    cJSON *root = cJSON_ParseWithLength(text, len);
    xfree(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(e, ERR_INVALID, "'%s' is not a JSON object", path);
    }
    int n = cJSON_GetArraySize(root);
    smap_init(&t->vocab, (size_t)n);
    t->n_vocab = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if (!cJSON_IsNumber(it) || it->valueint < 0 || it->valueint >= n) {
            cJSON_Delete(root);
            return err_set(e, ERR_INVALID, "'%s': token '%s' has a bad id", path, it->string);
        }
        smap_put(&t->vocab, it->string, it->valueint);
        if (it->valueint + 1 > t->n_vocab)
            t->n_vocab = it->valueint + 1;
    }
    cJSON_Delete(root);
    return 0;
}

static int load_merges(struct clip_tokenizer *t, const char *path, struct err *e)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text)
        return err_set(e, ERR_NOT_FOUND, "cannot read tokenizer merges '%s': %s", path,
                       strerror(errno));
    pmap_init(&t->ranks, 50000);
    int rank = 0, rc = 0;
    char *line = text, *next;
    int first = 1;
    for (; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        if (first) { /* "#version: 0.2" */
            first = 0;
            if (line[0] == '#')
                continue;
        }
        if (!*line)
            continue;
        char *sp = strchr(line, ' ');
        if (!sp) {
            rc = err_set(e, ERR_INVALID, "'%s': merge %d has no space", path, rank);
            break;
        }
        *sp = 0;
        int a = smap_get(&t->vocab, line, -1), b = smap_get(&t->vocab, sp + 1, -1);
        if (a < 0 || b < 0) {
            rc = err_set(e, ERR_INVALID, "'%s': merge %d names a symbol missing from the vocabulary",
                         path, rank);
            break;
        }
        pmap_put(&t->ranks, (uint32_t)a, (uint32_t)b, rank);
        rank++;
    }
    xfree(text);
    if (rc == 0 && rank + 512 + 2 != t->n_vocab)
        rc = err_set(e, ERR_INVALID, "'%s': %d merges do not match a %d-token vocabulary", path,
                     rank, t->n_vocab);
    return rc;
}

int clip_tokenizer_load(const char *dir, struct clip_tokenizer **out, struct err *e)
{
    char d[PATH_MAX + 256], path[PATH_MAX + 300];
    find_dir(dir, d, sizeof(d));
    struct clip_tokenizer *t = xcalloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    smap_init(&t->cache_idx, CACHE_MAX);
    t->cache = xcalloc(CACHE_MAX, sizeof(*t->cache));
    int rc;
    snprintf(path, sizeof(path), "%s/vocab.json", d);
    if ((rc = load_vocab(t, path, e)) < 0)
        goto fail;
    snprintf(path, sizeof(path), "%s/merges.txt", d);
    if ((rc = load_merges(t, path, e)) < 0)
        goto fail;
    for (int b = 0; b < 256; b++) {
        char s[16];
        size_t n = utf8_put(byte_char(b), s);
        s[n] = 0;
        t->byte_id[b] = smap_get(&t->vocab, s, -1);
        memcpy(s + n, "</w>", 5);
        t->byte_id_w[b] = smap_get(&t->vocab, s, -1);
        if (t->byte_id[b] < 0 || t->byte_id_w[b] < 0) {
            rc = err_set(e, ERR_INVALID, "'%s/vocab.json': byte character %d missing", d, b);
            goto fail;
        }
    }
    *out = t;
    return 0;
fail:
    clip_tokenizer_free(t);
    return rc;
}

static void cache_clear(struct clip_tokenizer *t)
{
    for (int i = 0; i < t->n_cache; i++)
        xfree(t->cache[i].ids);
    t->n_cache = 0;
    smap_release(&t->cache_idx);
    smap_init(&t->cache_idx, CACHE_MAX);
}

void clip_tokenizer_free(struct clip_tokenizer *t)
{
    if (!t)
        return;
    if (t->vocab.slots)
        smap_release(&t->vocab);
    xfree(t->ranks.keys);
    xfree(t->ranks.vals);
    if (t->cache) {
        cache_clear(t);
        xfree(t->cache);
    }
    smap_release(&t->cache_idx);
    pthread_mutex_destroy(&t->lock);
    xfree(t->embedding_dir);
    xfree(t);
}

int clip_tokenizer_vocab_size(const struct clip_tokenizer *t)
{
    return t->n_vocab;
}

int clip_tokenizer_token_id(const struct clip_tokenizer *t, const char *token)
{
    return smap_get(&t->vocab, token, -1);
}

/* ---- Unicode helpers ------------------------------------------------------------------------ */

static char cu_cls(unsigned cp)
{
    size_t lo = 0, hi = sizeof(cu_class) / sizeof(cu_class[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < cu_class[mid].lo)
            hi = mid;
        else if (cp > cu_class[mid].hi)
            lo = mid + 1;
        else
            return cu_class[mid].cls;
    }
    return 'X';
}

static unsigned cu_ccc(unsigned cp)
{
    size_t lo = 0, hi = sizeof(cu_combining) / sizeof(cu_combining[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < cu_combining[mid].lo)
            hi = mid;
        else if (cp > cu_combining[mid].hi)
            lo = mid + 1;
        else
            return cu_combining[mid].ccc;
    }
    return 0;
}

static unsigned cu_compose_pair(unsigned a, unsigned b)
{
    size_t lo = 0, hi = sizeof(cu_compose) / sizeof(cu_compose[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct cu_comp *c = &cu_compose[mid];
        if (a < c->a || (a == c->a && b < c->b))
            hi = mid;
        else if (a > c->a || b > c->b)
            lo = mid + 1;
        else
            return c->c;
    }
    return 0;
}

/* Lower-case cp into out (1..3 code points); returns the count. */
static int cu_lower_cp(unsigned cp, unsigned out[3])
{
    if (cp < 0x80) {
        out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        return 1;
    }
    size_t lo = 0, hi = sizeof(cu_lower) / sizeof(cu_lower[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < cu_lower[mid].from)
            hi = mid;
        else if (cp > cu_lower[mid].from)
            lo = mid + 1;
        else {
            out[0] = cu_lower[mid].to;
            return 1;
        }
    }
    for (size_t i = 0; i < sizeof(cu_lower_multi) / sizeof(cu_lower_multi[0]); i++) {
        if (cu_lower_multi[i].from == cp) {
            int n = 0;
            for (; n < 3 && cu_lower_multi[i].to[n]; n++)
                out[n] = cu_lower_multi[i].to[n];
            return n;
        }
    }
    out[0] = cp;
    return 1;
}

static int is_cjk(unsigned cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* NFC by composing in place (see the header for the shortcut). */
static size_t nfc_compose(unsigned *v, size_t n)
{
    /* Canonical ordering of combining marks (stable sort of runs by ccc). */
    for (size_t i = 1; i < n; i++) {
        unsigned c = cu_ccc(v[i]);
        if (!c)
            continue;
        size_t j = i;
        while (j > 0 && cu_ccc(v[j - 1]) > c) {
            unsigned tmp = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tmp;
            j--;
        }
    }
    size_t out = 0, starter = (size_t)-1;
    unsigned last_ccc = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = v[i], c = cu_ccc(cp);
        if (starter != (size_t)-1) {
            int blocked = out > starter + 1 && (last_ccc == 0 || last_ccc >= c);
            unsigned comp = blocked ? 0 : cu_compose_pair(v[starter], cp);
            if (comp) {
                v[starter] = comp;
                continue;
            }
        }
        if (c == 0) {
            starter = out;
            last_ccc = 0;
        } else {
            last_ccc = c;
        }
        v[out++] = cp;
    }
    return out;
}

/*
 * §2.2 normalisation to a code point array with single spaces between words:
 * clean, space out CJK, NFC, split on whitespace, lower-case.
 */
static size_t normalize(const char *text, unsigned **out)
{
    unsigned *in;
    size_t n = utf8_decode(text, &in); /* malformed bytes are U+FFFD, dropped later as the cleaner does */
    unsigned *a = xmalloc((3 * n + 1) * sizeof(unsigned));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned cp = in[i];
        char k = cu_cls(cp);
        if (k == 'X')
            continue;
        if (k == 'S') {
            a[m++] = ' ';
        } else if (is_cjk(cp)) {
            a[m++] = ' ';
            a[m++] = cp;
            a[m++] = ' ';
        } else {
            a[m++] = cp;
        }
    }
    xfree(in);
    m = nfc_compose(a, m);
    /* Split on whitespace, lower-case, re-join with single spaces. */
    unsigned *o = xmalloc((3 * m + 1) * sizeof(unsigned));
    size_t k = 0;
    int pending_space = 0;
    for (size_t i = 0; i < m; i++) {
        if (a[i] == ' ' || cu_cls(a[i]) == 'S') {
            pending_space = k > 0;
            continue;
        }
        if (pending_space) {
            o[k++] = ' ';
            pending_space = 0;
        }
        unsigned lo[3];
        int nl = cu_lower_cp(a[i], lo);
        for (int j = 0; j < nl; j++)
            o[k++] = lo[j];
    }
    xfree(a);
    *out = o;
    return k;
}

/* ---- BPE ------------------------------------------------------------------------------------ */

/* BPE over ids for one pre-token given as UTF-8 bytes. Appends to (ids, n, cap). */
static void bpe_word(struct clip_tokenizer *t, const unsigned char *s, size_t len,
                     int32_t **ids, size_t *n, size_t *cap)
{
    if (len == 0)
        return;
    char key[512];
    int cacheable = len < sizeof(key);
    if (cacheable) {
        memcpy(key, s, len);
        key[len] = 0;
        pthread_mutex_lock(&t->lock);
        int idx = smap_get(&t->cache_idx, key, -1);
        if (idx >= 0) {
            struct cache_entry *ce = &t->cache[idx];
            if (*n + (size_t)ce->n > *cap) {
                *cap = 2 * (*n + (size_t)ce->n) + 16;
                *ids = xrealloc(*ids, *cap * sizeof(int32_t));
            }
            memcpy(*ids + *n, ce->ids, (size_t)ce->n * sizeof(int32_t));
            *n += (size_t)ce->n;
            pthread_mutex_unlock(&t->lock);
            return;
        }
        pthread_mutex_unlock(&t->lock);
    }
    int32_t *sym = xmalloc(len * sizeof(int32_t));
    size_t ns = len;
    for (size_t i = 0; i < len; i++)
        sym[i] = i + 1 == len ? t->byte_id_w[s[i]] : t->byte_id[s[i]];
    while (ns > 1) {
        int best = -1;
        for (size_t i = 0; i + 1 < ns; i++) {
            int r = pmap_get(&t->ranks, (uint32_t)sym[i], (uint32_t)sym[i + 1]);
            if (r >= 0 && (best < 0 || r < best))
                best = r;
        }
        if (best < 0)
            break;
        /* Merge every non-overlapping occurrence of that pair, left to right. */
        size_t w = 0;
        for (size_t i = 0; i < ns;) {
            if (i + 1 < ns && pmap_get(&t->ranks, (uint32_t)sym[i], (uint32_t)sym[i + 1]) == best) {
                sym[w++] = 512 + best;
                i += 2;
            } else {
                sym[w++] = sym[i++];
            }
        }
        ns = w;
    }
    if (*n + ns > *cap) {
        *cap = 2 * (*n + ns) + 16;
        *ids = xrealloc(*ids, *cap * sizeof(int32_t));
    }
    memcpy(*ids + *n, sym, ns * sizeof(int32_t));
    *n += ns;
    if (cacheable) {
        pthread_mutex_lock(&t->lock);
        if (t->n_cache == CACHE_MAX)
            cache_clear(t);
        if (smap_get(&t->cache_idx, key, -1) < 0) {
            t->cache[t->n_cache].ids = sym;
            t->cache[t->n_cache].n = (int)ns;
            smap_put(&t->cache_idx, key, t->n_cache);
            t->n_cache++;
            sym = NULL;
        }
        pthread_mutex_unlock(&t->lock);
    }
    xfree(sym);
}

static int match_literal(const unsigned *v, size_t n, size_t i, const char *lit)
{
    size_t l = strlen(lit);
    if (i + l > n)
        return 0;
    for (size_t k = 0; k < l; k++)
        if (v[i + k] != (unsigned char)lit[k])
            return 0;
    return 1;
}

void clip_tokenizer_encode(struct clip_tokenizer *t, const char *text, int32_t **ids_out,
                           size_t *n_out)
{
    unsigned *v;
    size_t n = normalize(text, &v);
    int32_t *ids = NULL;
    size_t nid = 0, cap = 0;
    char *bytes = xmalloc(4 * n + 8);
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (size_t i = 0; i < n;) {
        unsigned cp = v[i];
        if (cp == ' ') {
            i++;
            continue;
        }
        size_t j = i;
        int special = -1;
        if (match_literal(v, n, i, "<|startoftext|>")) {
            special = CLIP_TOKEN_BOS;
            j = i + 15;
        } else if (match_literal(v, n, i, "<|endoftext|>")) {
            special = CLIP_TOKEN_EOS;
            j = i + 13;
        }
        if (special >= 0) {
            if (nid == cap) {
                cap = 2 * cap + 16;
                ids = xrealloc(ids, cap * sizeof(int32_t));
            }
            ids[nid++] = special;
            i = j;
            continue;
        }
        if (cp == '\'') {
            for (size_t c = 0; c < 7; c++) {
                if (match_literal(v, n, i, contractions[c])) {
                    j = i + strlen(contractions[c]);
                    break;
                }
            }
        }
        if (j == i) {
            char k = cu_cls(cp);
            if (k == 'L') {
                while (j < n && cu_cls(v[j]) == 'L')
                    j++;
            } else if (k == 'N') {
                j = i + 1;
            } else {
                while (j < n && v[j] != ' ' && cu_cls(v[j]) != 'L' && cu_cls(v[j]) != 'N' &&
                       cu_cls(v[j]) != 'S')
                    j++;
            }
        }
        size_t nb = 0;
        for (size_t k = i; k < j; k++)
            nb += utf8_put(v[k], bytes + nb);
        bpe_word(t, (const unsigned char *)bytes, nb, &ids, &nid, &cap);
        i = j;
    }
    xfree(bytes);
    xfree(v);
    *ids_out = ids;
    *n_out = nid;
}
