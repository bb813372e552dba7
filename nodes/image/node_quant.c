/*
 * Pillow's median cut, palette mapping and Floyd-Steinberg, and ComfyUI's Bayer
 * pre-dither (node_quant.h). Written from the behaviour of Pillow's libImaging
 * (Quant.c, QuantHeap.c, Convert.c, Palette.c) as observed and read; the data
 * structures here are not Pillow's (sorted arrays and a histogram instead of
 * hash tables and linked lists), only the decisions are, because each one moves
 * the palette:
 *
 *  - Pixels are counted per distinct colour; while there are more than 65536 of
 *    them, every channel is shifted right one more bit (Pillow's hash "scale")
 *    and equal colours merge. The whole median cut then runs on those shifted
 *    colours; the palette averages the original pixels.
 *  - Pillow's pixel hash is injective on 24-bit colours (checked exhaustively), so
 *    its hash-equality grouping is grouping by colour, and the order Pillow walks
 *    its table in cannot change which colours fall in which box: a split depends
 *    only on the set of colours and their counts.
 *  - Boxes wait in a binary max-heap keyed on pixel count, with QuantHeap.c's
 *    tie rules (sift up only past a strictly smaller parent; sift down takes the
 *    right child only when the left is strictly smaller, and stops only before a
 *    strictly smaller child). Ties between equal counts are common, and these rules
 *    decide which box is split first.
 *  - A box is split along the axis whose range times its luminance weight (77, 150,
 *    29) is largest (the first on ties), between values: walking the values from
 *    the highest, the "left" box takes every value up to and including the one at
 *    which its pixel count passes half; when that takes all of them the lowest
 *    value goes right instead. A popped box of a single (shifted) colour is dropped
 *    from the heap and stays a leaf.
 *  - Palette order is the box tree's leaves left to right (higher values left).
 *    Entries are (int)(0.5 + sum / count) per channel, with sums in 32-bit unsigned
 *    arithmetic as Pillow keeps them (they wrap on images above ~16M pixels of one
 *    box, and then so do ours).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The Bayer threshold is numpy's float64 ops, each rounded: no fused a*b+c. */
#pragma GCC optimize("fp-contract=off")

#include "alloc.h"
#include "node_quant.h"

#define QUANT_MAX_COLOURS 65536 /* Pillow's MAX_HASH_ENTRIES */

static const int axis_weight[3] = {77, 150, 29};

/* One distinct (shifted) colour. */
struct qcolour {
    uint8_t c[3];
    uint32_t count;  /* pixels */
    uint32_t sum[3]; /* of the original channel values, mod 2^32 */
};

/* ---- distinct colours ------------------------------------------------------------------ */

static uint32_t qcolour_key(const struct qcolour *q)
{
    return (uint32_t)q->c[0] << 16 | (uint32_t)q->c[1] << 8 | q->c[2];
}

static int qcolour_cmp(const void *a, const void *b)
{
    uint32_t x = qcolour_key(a), y = qcolour_key(b);
    return x < y ? -1 : x > y;
}

/* Merge runs of equal colours in a sorted array; returns the new count. */
static size_t qcolour_merge(struct qcolour *q, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && qcolour_key(&q[m - 1]) == qcolour_key(&q[i])) {
            q[m - 1].count += q[i].count;
            for (int k = 0; k < 3; k++)
                q[m - 1].sum[k] += q[i].sum[k];
        } else {
            q[m++] = q[i];
        }
    }
    return m;
}

/* The distinct colours of the pixels, sorted, by a three-pass radix sort of the keys. */
static int distinct_colours(const uint8_t *rgb, size_t n, struct qcolour **out, size_t *n_out,
                            struct err *e)
{
    uint32_t *key = NULL, *tmp = NULL;
    int rc;
    if ((rc = xtry_malloc(n * sizeof *key, (void **)&key, e)) < 0 ||
        (rc = xtry_malloc(n * sizeof *tmp, (void **)&tmp, e)) < 0) {
        xfree(key);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        key[i] = (uint32_t)rgb[3 * i] << 16 | (uint32_t)rgb[3 * i + 1] << 8 | rgb[3 * i + 2];
    for (int shift = 0; shift < 24; shift += 8) {
        size_t pos[257] = {0};
        for (size_t i = 0; i < n; i++)
            pos[((key[i] >> shift) & 255) + 1]++;
        for (int b = 0; b < 256; b++)
            pos[b + 1] += pos[b];
        for (size_t i = 0; i < n; i++)
            tmp[pos[(key[i] >> shift) & 255]++] = key[i];
        uint32_t *t = key;
        key = tmp;
        tmp = t;
    }
    xfree(tmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += i == 0 || key[i] != key[i - 1];
    struct qcolour *q = NULL;
    if ((rc = xtry_calloc(m, sizeof *q, (void **)&q, e)) < 0) {
        xfree(key);
        return rc;
    }
    m = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || key[i] != key[i - 1]) {
            q[m].c[0] = (uint8_t)(key[i] >> 16);
            q[m].c[1] = (uint8_t)(key[i] >> 8);
            q[m].c[2] = (uint8_t)key[i];
            m++;
        }
        struct qcolour *d = &q[m - 1];
        d->count++;
        for (int k = 0; k < 3; k++)
            d->sum[k] += d->c[k];
    }
    xfree(key);
    *out = q;
    *n_out = m;
    return 0;
}

/* ---- boxes and the heap ---------------------------------------------------------------- */

struct qbox {
    size_t lo, hi;       /* colours [lo, hi) of the array */
    uint32_t count;      /* pixels */
    uint8_t mn[3], mx[3];
    int next;            /* next leaf to the right, -1 at the end */
};

static void box_bounds(struct qbox *b, const struct qcolour *q)
{
    for (int k = 0; k < 3; k++) {
        b->mn[k] = 255;
        b->mx[k] = 0;
    }
    for (size_t i = b->lo; i < b->hi; i++) {
        for (int k = 0; k < 3; k++) {
            if (q[i].c[k] < b->mn[k])
                b->mn[k] = q[i].c[k];
            if (q[i].c[k] > b->mx[k])
                b->mx[k] = q[i].c[k];
        }
    }
}

static int box_is_one_colour(const struct qbox *b)
{
    return b->mn[0] == b->mx[0] && b->mn[1] == b->mx[1] && b->mn[2] == b->mx[2];
}

/* A 1-based max-heap of box indices with QuantHeap.c's tie rules (see the top). */
struct qheap {
    int *a; /* [1..n] */
    int n;
};

static void heap_push(struct qheap *h, const struct qbox *boxes, int id)
{
    int k = ++h->n;
    while (k > 1 && boxes[id].count > boxes[h->a[k / 2]].count) {
        h->a[k] = h->a[k / 2];
        k /= 2;
    }
    h->a[k] = id;
}

static int heap_pop(struct qheap *h, const struct qbox *boxes)
{
    int top = h->a[1], last = h->a[h->n--], k = 1;
    while (2 * k <= h->n) {
        int child = 2 * k;
        if (child < h->n && boxes[h->a[child]].count < boxes[h->a[child + 1]].count)
            child++;
        if (boxes[last].count > boxes[h->a[child]].count)
            break;
        h->a[k] = h->a[child];
        k = child;
    }
    h->a[k] = last;
    return top;
}

/*
 * Split box `id` in place: it keeps the left (high) part, the right part becomes box
 * `nid`, linked after it. The box has more than one colour.
 */
static void box_split(struct qbox *boxes, int id, int nid, struct qcolour *q)
{
    struct qbox *b = &boxes[id];
    int axis = 0, best = (b->mx[0] - b->mn[0]) * axis_weight[0];
    for (int k = 1; k < 3; k++) {
        int f = (b->mx[k] - b->mn[k]) * axis_weight[k];
        if (f > best) {
            best = f;
            axis = k;
        }
    }
    uint64_t hist[256] = {0};
    for (size_t i = b->lo; i < b->hi; i++)
        hist[q[i].c[axis]] += q[i].count;
    /* The lowest value that the left part keeps. */
    uint64_t cum = 0;
    int cut = b->mn[axis];
    for (int v = b->mx[axis]; v >= b->mn[axis]; v--) {
        cum += hist[v];
        if (cum * 2 > b->count) {
            cut = v;
            break;
        }
    }
    if (cut == b->mn[axis])
        cut++; /* everything went left: the lowest value goes right */
    size_t i = b->lo, j = b->hi;
    uint32_t left = 0;
    while (i < j) {
        if (q[i].c[axis] >= cut) {
            left += q[i].count;
            i++;
        } else {
            struct qcolour t = q[i];
            q[i] = q[--j];
            q[j] = t;
        }
    }
    struct qbox *r = &boxes[nid];
    r->lo = i;
    r->hi = b->hi;
    r->count = b->count - left;
    r->next = b->next;
    b->hi = i;
    b->count = left;
    b->next = nid;
    box_bounds(b, q);
    box_bounds(r, q);
}

int node_quant_median_cut(const uint8_t *rgb, size_t n_px, int colors, uint8_t pal[256][3],
                          int *n_pal, struct err *e)
{
    *n_pal = 0;
    if (n_px == 0 || colors < 1 || colors > 256)
        return err_set(e, ERR_INVALID, "cannot quantize %zu pixels to %d colours", n_px, colors);
    struct qcolour *q;
    size_t m;
    int rc = distinct_colours(rgb, n_px, &q, &m, e);
    if (rc < 0)
        return rc;
    while (m > QUANT_MAX_COLOURS) {
        for (size_t i = 0; i < m; i++)
            for (int k = 0; k < 3; k++)
                q[i].c[k] >>= 1;
        qsort(q, m, sizeof *q, qcolour_cmp);
        m = qcolour_merge(q, m);
    }
    /* At most colors - 1 splits: 2 * colors boxes and heap slots are enough. */
    struct qbox boxes[512];
    int slots[513];
    struct qheap heap = {.a = slots, .n = 0};
    int n_boxes = 1;
    boxes[0] = (struct qbox){.lo = 0, .hi = m, .count = (uint32_t)n_px, .next = -1};
    box_bounds(&boxes[0], q);
    heap_push(&heap, boxes, 0);
    for (int split = 1; split < colors; split++) {
        int id;
        do {
            if (heap.n == 0)
                goto done;
            id = heap_pop(&heap, boxes);
        } while (box_is_one_colour(&boxes[id]));
        box_split(boxes, id, n_boxes, q);
        heap_push(&heap, boxes, id);
        heap_push(&heap, boxes, n_boxes);
        n_boxes++;
    }
done:
    for (int id = 0; id >= 0; id = boxes[id].next) {
        const struct qbox *b = &boxes[id];
        if (b->lo == b->hi)
            continue;
        uint32_t count = 0, sum[3] = {0, 0, 0};
        for (size_t i = b->lo; i < b->hi; i++) {
            count += q[i].count;
            for (int k = 0; k < 3; k++)
                sum[k] += q[i].sum[k];
        }
        for (int k = 0; k < 3; k++)
            pal[*n_pal][k] = (uint8_t)(int)(0.5 + (double)sum[k] / (double)count);
        (*n_pal)++;
    }
    xfree(q);
    return 0;
}

/* ---- mapping --------------------------------------------------------------------------- */

/*
 * Nearest palette entry to the low corner of (r, g, b)'s 4x4x4 cell, memoised per cell.
 * A cell's search runs over its 32x32x32 cube's candidates: the entries whose least
 * distance to the cube's cell corners is no more than the smallest greatest distance
 * any entry has to them. An entry left out is farther than that one from every corner,
 * so it could never be the nearest, and the candidates keep index order, so ties still
 * go to the lowest index (Pillow prunes the same way, after Heckbert).
 */
struct qmap {
    const uint8_t (*pal)[3];
    int n;
    int16_t *cell;   /* [64 * 64 * 64], -1 = not computed */
    int16_t *n_cand; /* [8 * 8 * 8], -1 = not computed */
    uint8_t *cand;   /* [8 * 8 * 8][256] */
};

static unsigned sq(int v)
{
    return (unsigned)(v * v);
}

static void qmap_candidates(struct qmap *m, int cube)
{
    int lo[3] = {(cube >> 6) << 5, ((cube >> 3) & 7) << 5, (cube & 7) << 5};
    unsigned dmin[256], best_max = ~0u;
    for (int i = 0; i < m->n; i++) {
        unsigned mn = 0, mx = 0;
        for (int k = 0; k < 3; k++) {
            int p = m->pal[i][k], a = lo[k], b = lo[k] + 28; /* the cube's cell corners */
            mn += p < a ? sq(a - p) : p > b ? sq(p - b) : 0;
            mx += sq(p - a) > sq(p - b) ? sq(p - a) : sq(p - b);
        }
        dmin[i] = mn;
        best_max = mx < best_max ? mx : best_max;
    }
    int n = 0;
    uint8_t *list = m->cand + (size_t)cube * 256;
    for (int i = 0; i < m->n; i++)
        if (dmin[i] <= best_max)
            list[n++] = (uint8_t)i;
    m->n_cand[cube] = (int16_t)n;
}

static int qmap_lookup(struct qmap *m, int r, int g, int b)
{
    int16_t *slot = &m->cell[(r >> 2) << 12 | (g >> 2) << 6 | (b >> 2)];
    if (*slot < 0) {
        int cube = (r >> 5) << 6 | (g >> 5) << 3 | (b >> 5);
        if (m->n_cand[cube] < 0)
            qmap_candidates(m, cube);
        const uint8_t *list = m->cand + (size_t)cube * 256;
        int cr = r & ~3, cg = g & ~3, cb = b & ~3, best = 0;
        unsigned dbest = ~0u;
        for (int j = 0; j < m->n_cand[cube]; j++) {
            const uint8_t *p = m->pal[list[j]];
            unsigned d = sq(cr - p[0]) + sq(cg - p[1]) + sq(cb - p[2]);
            if (d < dbest) {
                dbest = d;
                best = list[j];
            }
        }
        *slot = (int16_t)best;
    }
    return *slot;
}

static int clip8(int v)
{
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

/*
 * Pillow's Floyd-Steinberg, restated. Per row and channel: `carry` holds 7/16's
 * numerator for the next pixel, below[x + 1] the numerator the row above left for
 * this pixel (3 from up-right, 5 from up, 1 from up-left); the sum is divided by 16
 * with C's truncation before clipping. After mapping, this pixel's error e becomes
 * 7e for the right neighbour, and the slot below its left neighbour is completed with
 * 3e. At the end of a row Pillow stores the blue channel's pending values in the last
 * slot for all three channels; that is kept, as it changes the next row's last pixel.
 */
static void map_dithered(struct qmap *m, const uint8_t *rgb, int w, int h, uint8_t *idx, int *below)
{
    for (int y = 0; y < h; y++) {
        int carry[3] = {0, 0, 0}, pend5[3] = {0, 0, 0}, pend1[3] = {0, 0, 0};
        const uint8_t *in = rgb + (size_t)y * w * 3;
        for (int x = 0; x < w; x++) {
            int v[3];
            for (int k = 0; k < 3; k++)
                v[k] = clip8(in[3 * x + k] + (carry[k] + below[3 * (x + 1) + k]) / 16);
            int p = qmap_lookup(m, v[0], v[1], v[2]);
            idx[(size_t)y * w + x] = (uint8_t)p;
            for (int k = 0; k < 3; k++) {
                int err = v[k] - m->pal[p][k];
                below[3 * x + k] = 3 * err + pend5[k];
                pend5[k] = 5 * err + pend1[k];
                pend1[k] = err;
                carry[k] = 7 * err;
            }
        }
        below[3 * w + 0] = pend5[2];
        below[3 * w + 1] = pend1[2];
        below[3 * w + 2] = pend1[2];
    }
}

void node_quant_map(const uint8_t *rgb, int w, int h, const uint8_t pal[][3], int n_pal,
                    int dither, uint8_t *idx)
{
    struct qmap m = {.pal = pal, .n = n_pal, .cell = xmalloc(64 * 64 * 64 * sizeof(int16_t)),
                     .n_cand = xmalloc(8 * 8 * 8 * sizeof(int16_t)), .cand = xmalloc(8 * 8 * 8 * 256)};
    memset(m.cell, 0xff, 64 * 64 * 64 * sizeof(int16_t));
    memset(m.n_cand, 0xff, 8 * 8 * 8 * sizeof(int16_t));
    if (dither) {
        int *below = xcalloc((size_t)(w + 1) * 3, sizeof *below);
        map_dithered(&m, rgb, w, h, idx, below);
        xfree(below);
    } else {
        for (size_t i = 0; i < (size_t)w * h; i++)
            idx[i] = (uint8_t)qmap_lookup(&m, rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
    }
    xfree(m.cell);
    xfree(m.n_cand);
    xfree(m.cand);
}

/* ---- Bayer ----------------------------------------------------------------------------- */

/*
 * ComfyUI's normalized_bayer_matrix(n) (size 2^n, row-major into out): M(0) = 0, and
 * M(n) is the 2x2 block matrix [[t - 1.5, t + 0.5], [t + 1.5, t - 0.5]] / 4^n with
 * t = 4^n * M(n - 1), in float32 (every value is exact there).
 */
static void bayer_matrix(int n, float *out)
{
    if (n == 0) {
        out[0] = 0.0f;
        return;
    }
    int h = 1 << (n - 1), s = 2 * h;
    float q = (float)(1 << (2 * n));
    float sub[8 * 8];
    bayer_matrix(n - 1, sub);
    static const float add[2][2] = {{-1.5f, 0.5f}, {1.5f, -0.5f}};
    for (int by = 0; by < 2; by++)
        for (int bx = 0; bx < 2; bx++)
            for (int i = 0; i < h; i++)
                for (int j = 0; j < h; j++)
                    out[(by * h + i) * s + bx * h + j] = (q * sub[i * h + j] + add[by][bx]) / q;
}

void node_quant_bayer(const uint8_t *rgb, int w, int h, int order, int n_colors, uint8_t *out)
{
    int n = 0;
    while ((1 << n) < order)
        n++;
    float mat[16 * 16];
    bayer_matrix(n, mat);
    /*
     * spread * matrix + 0.5 is np.dot(spread, matrix) (np.matrix's __rmul__): float64.
     * torch's float32 add_ of that float64 matrix computes in float64 and stores float32.
     */
    double spread = 2.0 * 256.0 / (double)n_colors, t[16 * 16];
    for (int i = 0; i < order * order; i++)
        t[i] = spread * (double)mat[i] + 0.5;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            double d = t[(y % order) * order + x % order];
            for (int k = 0; k < 3; k++) {
                size_t i = ((size_t)y * w + x) * 3 + k;
                float v = (float)((double)rgb[i] + d);
                v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
                out[i] = (uint8_t)v;
            }
        }
    }
}
