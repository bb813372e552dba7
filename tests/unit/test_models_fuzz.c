/*
 * test_models_fuzz — deterministic mutation fuzzing of the two parsers models/ exposes
 * to user files and text: the safetensors header (st_parse_header) and the prompt
 * tokenizer (clip_tokenize_prompt). Every input must give a result or a clean error,
 * and results must satisfy the parsers' invariants (offsets inside the data, no
 * overlaps; chunks of 77 starting with BOS, ids in the vocabulary). Run under the
 * asan preset this is the CI fuzz pass; built with -DLATENTD_LIBFUZZER and clang's
 * -fsanitize=fuzzer, the same checks serve as libFuzzer targets (FUZZ_TARGET=st|tok).
 * Arguments: tokenizer dir, iterations (default 20000).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clip_tokenizer.h"
#include "harness.h"
#include "log.h"
#include "safetensors.h"

static struct clip_tokenizer *tok;

/* Returns 0 if the parser's result honours its contract. */
static int check_header(const uint8_t *data, size_t n, uint64_t data_size)
{
    struct st_file f;
    memset(&f, 0, sizeof(f));
    struct err e = {0};
    if (st_parse_header((const char *)data, n, data_size, "fuzz", &f, &e) < 0)
        return e.msg[0] ? 0 : -1; /* an error must say why */
    int bad = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const struct st_tensor *t = &f.tensors[i];
        if (t->offset + t->nbytes > data_size || t->nbytes != st_tensor_numel(t) * st_dtype_size(t->dtype))
            bad = 1;
        if (i && strcmp(f.tensors[i - 1].name, t->name) >= 0)
            bad = 1;
        for (size_t j = 0; j < i; j++) {
            const struct st_tensor *u = &f.tensors[j];
            if (t->nbytes && u->nbytes && t->offset < u->offset + u->nbytes &&
                u->offset < t->offset + t->nbytes)
                bad = 1;
        }
    }
    st_file_release_tables(&f);
    return bad ? -1 : 0;
}

static int check_prompt(const uint8_t *data, size_t n)
{
    char *s = xmalloc(n + 1);
    memcpy(s, data, n);
    s[n] = 0;
    struct clip_tokens t;
    clip_tokenize_prompt(tok, s, &t);
    int bad = t.n_chunks < 1;
    for (int c = 0; c < t.n_chunks && !bad; c++) {
        const int32_t *ids = t.ids + c * CLIP_CHUNK_LEN;
        bad |= ids[0] != CLIP_TOKEN_BOS;
        int seen_end = 0;
        for (int j = 1; j < CLIP_CHUNK_LEN; j++) {
            bad |= ids[j] < 0 || (ids[j] >= 49408 && ids[j] < CLIP_EMBED_ID_BASE);
            seen_end |= ids[j] == CLIP_TOKEN_EOS;
        }
        bad |= !seen_end;
    }
    clip_tokens_release(&t);
    xfree(s);
    return bad ? -1 : 0;
}

#ifdef LATENTD_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    const char *target = getenv("FUZZ_TARGET");
    if (target && !strcmp(target, "tok")) {
        if (!tok && clip_tokenizer_load(NULL, &tok, NULL) < 0)
            abort();
        if (check_prompt(data, n) < 0)
            abort();
    } else if (check_header(data, n, n * 4u) < 0) {
        abort();
    }
    return 0;
}
#else

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char seed_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[32,34]}}";

static const char *const snippets[] = {
    "\"", "{", "}", "[", "]", ",", ":", "0", "-1", "1e30", "18446744073709551616", "null",
    "\"F8_E4M3\"", "\"shape\"", "\"data_offsets\"", "\"dtype\"", "\\u0000", "[0,0]", "9007199254740993",
};

static void mutate(char *buf, size_t *n, size_t cap)
{
    int kind = (int)(next() % 5);
    size_t pos = *n ? next() % *n : 0;
    if (kind == 0 && *n) { /* flip a byte */
        buf[pos] = (char)(next() & 0xff);
    } else if (kind == 1 && *n) { /* truncate */
        *n = pos;
    } else if (kind == 2) { /* insert a snippet */
        const char *s = snippets[next() % (sizeof(snippets) / sizeof(snippets[0]))];
        size_t l = strlen(s);
        if (*n + l < cap) {
            memmove(buf + pos + l, buf + pos, *n - pos);
            memcpy(buf + pos, s, l);
            *n += l;
        }
    } else if (kind == 3 && *n > 4) { /* delete a run */
        size_t l = 1 + next() % 8;
        if (pos + l > *n)
            l = *n - pos;
        memmove(buf + pos, buf + pos + l, *n - pos - l);
        *n -= l;
    } else if (*n) { /* change a digit */
        for (size_t i = pos; i < *n; i++)
            if (buf[i] >= '0' && buf[i] <= '9') {
                buf[i] = (char)('0' + next() % 10);
                break;
            }
    }
}

static const char *const words[] = {
    "(", ")", "\\(", "\\)", "[", "]", ":", "1.5", ":0x1", " ", "\n", "embedding:", "emb,", "a",
    "photo", "cat", "é", "日本", "\xf0\x9f\x98\x80", "\xe2\x80\x8b", "\xff", "\xc3", "<|endoftext|>",
    "'s", "2024", "!!", "x,", "(((", ")))", "\t", "\xcc\x81", "İ", "Σ",
};

int main(int argc, char **argv)
{
    long iters = argc > 2 ? atol(argv[2]) : 20000;
    struct err e = {0};
    long live0 = alloc_live_count();
    log_set_level(LOG_ERROR); /* missing embeddings warn on every prompt */
    if (clip_tokenizer_load(argc > 1 ? argv[1] : NULL, &tok, &e) < 0) {
        ok(0, "load tokenizer: %s", e.msg);
        return harness_done();
    }
    size_t cap = 4096;
    char *buf = xmalloc(cap);
    int bad = 0, accepted = 0;
    for (long it = 0; it < iters; it++) {
        size_t n = strlen(seed_header);
        memcpy(buf, seed_header, n);
        int muts = 1 + (int)(next() % 6);
        for (int m = 0; m < muts; m++)
            mutate(buf, &n, cap);
        uint64_t ds = next() % 3 == 0 ? next() % 64 : 34;
        if (check_header((const uint8_t *)buf, n, ds) < 0) {
            bad++;
            printf("# header contract broken for: %.*s\n", (int)n, buf);
        }
        struct st_file f = {0};
        if (st_parse_header(buf, n, ds, "fuzz", &f, NULL) == 0) {
            accepted++;
            st_file_release_tables(&f);
        }
    }
    ok(bad == 0, "%ld mutated headers: no contract violations (%d accepted)", iters, accepted);
    bad = 0;
    for (long it = 0; it < iters / 10; it++) {
        size_t n = 0;
        int nw = (int)(next() % 60);
        for (int k = 0; k < nw; k++) {
            const char *w = words[next() % (sizeof(words) / sizeof(words[0]))];
            size_t l = strlen(w);
            if (n + l + 1 >= cap)
                break;
            memcpy(buf + n, w, l);
            n += l;
        }
        if (check_prompt((const uint8_t *)buf, n) < 0) {
            bad++;
            printf("# prompt contract broken for: %.*s\n", (int)n, buf);
        }
    }
    ok(bad == 0, "%ld random prompts: chunks well formed", iters / 10);
    xfree(buf);
    clip_tokenizer_free(tok);
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
#endif
