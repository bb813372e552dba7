/*
 * test_models_tok — CLIP tokenizer, ComfyUI prompt syntax and 77-token chunking,
 * against sd15.md's vectors and against tools/reference_sd15.py's output on a
 * corpus (tests/fixtures/models/tokenizer_corpus.json -> tokenizer_expected.txt).
 * Argument 1: the fixtures directory; argument 2: the tokenizer data directory.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "buf.h"
#include "clip_tokenizer.h"
#include "harness.h"

static const char *fixtures;
static struct clip_tokenizer *tok;

static char *slurp(const char *path)
{
    struct buf b;
    buf_init(&b);
    if (buf_read_file(&b, path) < 0) {
        buf_release(&b);
        return NULL;
    }
    return buf_detach(&b, NULL);
}

static void expect_ids(const char *text, const int32_t *want, size_t nwant)
{
    int32_t *ids;
    size_t n;
    clip_tokenizer_encode(tok, text, &ids, &n);
    int same = n == nwant;
    for (size_t i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    struct buf got;
    buf_init(&got);
    for (size_t i = 0; i < n; i++)
        buf_printf(&got, "%d ", ids[i]);
    ok(same, "encode '%s' (got %s)", text, got.ptr);
    buf_release(&got);
    xfree(ids);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / 4

static void test_spec_vectors(void)
{
    EXPECT_EQ(clip_tokenizer_vocab_size(tok), 49408);
    EXPECT_EQ(clip_tokenizer_token_id(tok, "<|startoftext|>"), 49406);
    EXPECT_EQ(clip_tokenizer_token_id(tok, "!"), 0);
    expect_ids("a photo of a cat", IDS(320, 1125, 539, 320, 2368));
    expect_ids("A Photo  OF a CAT!!", IDS(320, 1125, 539, 320, 2368, 748));
    expect_ids("masterpiece, best quality, 1girl", IDS(12066, 267, 949, 3027, 267, 272, 1611));
    expect_ids("it's 2024", IDS(585, 568, 273, 271, 273, 275));
    expect_ids("photorealistic landscapes", IDS(1153, 16157, 15344));
    expect_ids("café naïve", IDS(15304, 1097, 35689, 563));
    expect_ids("cafe\xcc\x81 nai\xcc\x88ve", IDS(15304, 1097, 35689, 563)); /* NFD input */
}

static void test_parse(void)
{
    struct clip_segment *s;
    size_t n;
    clip_prompt_parse("a (red:1.5) cat", &s, &n);
    ok(n == 3 && !strcmp(s[0].text, "a ") && s[0].weight == 1.0 && !strcmp(s[1].text, "red") &&
           s[1].weight == 1.5 && !strcmp(s[2].text, " cat"),
       "a (red:1.5) cat -> 3 segments");
    clip_segments_free(s, n);
    clip_prompt_parse("((a))", &s, &n);
    ok(n == 1 && s[0].weight == 1.1 * 1.1, "((a)) -> 1.1*1.1 exactly as Python (%.17g)",
       n ? s[0].weight : 0);
    clip_segments_free(s, n);
    clip_prompt_parse("a) ((b))", &s, &n);
    ok(n == 3 && !strcmp(s[0].text, "a) (") && !strcmp(s[1].text, "b") && s[1].weight == 1.1 &&
           !strcmp(s[2].text, ")"),
       "unmatched ) quirk as ComfyUI");
    clip_segments_free(s, n);
    clip_prompt_parse("(x:0.5:2)", &s, &n);
    ok(n == 1 && !strcmp(s[0].text, "x:0.5") && s[0].weight == 2.0, "(x:0.5:2)");
    clip_segments_free(s, n);
    clip_prompt_parse("\\(lit\\) (a\\)b)", &s, &n);
    ok(n == 2 && !strcmp(s[0].text, "(lit) ") && !strcmp(s[1].text, "a)b") && s[1].weight == 1.1,
       "escaped parentheses are literal");
    clip_segments_free(s, n);
}

static void test_chunks_basic(void)
{
    struct clip_tokens t;
    clip_tokenize_prompt(tok, "", &t);
    ok(t.n_chunks == 1 && t.ids[0] == CLIP_TOKEN_BOS && t.ids[1] == CLIP_TOKEN_EOS &&
           t.ids[76] == CLIP_TOKEN_PAD && !t.has_weights,
       "empty prompt: one chunk [BOS, EOS, PAD x75]");
    clip_tokens_release(&t);
    clip_tokenize_prompt(tok, "a (red:1.5) cat", &t);
    ok(t.n_chunks == 1 && t.ids[2] == 736 && t.weights[2] == 1.5f && t.weights[1] == 1.0f &&
           t.has_weights,
       "weighted token carries its weight");
    clip_tokens_release(&t);
    clip_tokenize_prompt(tok, "an embedding:mystyle, then text", &t);
    ok(t.n_embedding_skipped == 1, "embedding: name warned about and skipped");
    clip_tokens_release(&t);
}

/* Compare every corpus prompt with the reference's chunk ids and weights. */
static void test_corpus(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/tokenizer_corpus.json", fixtures);
    char *json = slurp(path);
    snprintf(path, sizeof(path), "%s/tokenizer_expected.txt", fixtures);
    char *exp = slurp(path);
    ok(json && exp, "read corpus and expected output");
    if (!json || !exp) {
        xfree(json);
        xfree(exp);
        return;
    }
    cJSON *arr = cJSON_Parse(json);
    int total = 0, good = 0;
    char *line = exp;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        const char *text = it->valuestring;
        int nch = 0, hw = 0;
        sscanf(line, "%d %d", &nch, &hw);
        line = strchr(line, '\n') + 1;
        struct clip_tokens t;
        clip_tokenize_prompt(tok, text, &t);
        struct buf got;
        buf_init(&got);
        int same = t.n_chunks == nch && t.has_weights == hw;
        for (int c = 0; c < nch; c++) {
            char *end = strchr(line, '\n');
            *end = 0;
            buf_reset(&got);
            for (int j = 0; c < t.n_chunks && j < 77; j++) {
                int32_t id = t.ids[c * 77 + j];
                float w = t.weights[c * 77 + j];
                if (j)
                    buf_addc(&got, ' ');
                if (w == 1.0f)
                    buf_printf(&got, "%d", id);
                else
                    buf_printf(&got, "%d:%.9g", id, (double)w);
            }
            /* The reference prints the Python double; compare weights as float32. */
            if (same && strcmp(got.ptr, line) != 0) {
                char *a = got.ptr, *b = line;
                for (int j = 0; j < 77 && same; j++) {
                    long ia = strtol(a, &a, 10), ib = strtol(b, &b, 10);
                    double wa = 1, wb = 1;
                    if (*a == ':')
                        wa = strtod(a + 1, &a);
                    if (*b == ':')
                        wb = strtod(b + 1, &b);
                    same = ia == ib && (float)wa == (float)wb;
                }
                if (!same)
                    printf("# chunk %d\n#   got  %s\n#   want %s\n", c, got.ptr, line);
            }
            line = end + 1;
        }
        buf_release(&got);
        total++;
        good += same;
        if (!same)
            printf("# mismatch for prompt %d: '%.60s' (chunks %d vs %d)\n", total - 1, text,
                   t.n_chunks, nch);
        clip_tokens_release(&t);
    }
    ok(total > 50 && good == total, "corpus: %d of %d prompts match the reference", good, total);
    cJSON_Delete(arr);
    xfree(json);
    xfree(exp);
}

static void *thread_main(void *arg)
{
    int *bad = arg;
    for (int i = 0; i < 200; i++) {
        int32_t *ids;
        size_t n;
        clip_tokenizer_encode(tok, "a photo of a cat, masterpiece, best quality", &ids, &n);
        if (n != 10 || ids[0] != 320)
            (*bad)++;
        xfree(ids);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    fixtures = argc > 1 ? argv[1] : "tests/fixtures/models";
    const char *dir = argc > 2 ? argv[2] : NULL;
    long live0 = alloc_live_count();
    struct err e = {0};
    struct clip_tokenizer *bad = NULL;
    ok(clip_tokenizer_load("/nonexistent-dir", &bad, &e) == ERR_NOT_FOUND &&
           strstr(e.msg, "/nonexistent-dir/vocab.json"),
       "missing data dir: %s", e.msg);
    err_clear(&e);
    if (clip_tokenizer_load(dir, &tok, &e) < 0) {
        ok(0, "load tokenizer: %s", e.msg);
        return harness_done();
    }
    test_spec_vectors();
    test_parse();
    test_chunks_basic();
    test_corpus();
    pthread_t th[2];
    int badn[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, thread_main, &badn[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ok(badn[0] + badn[1] == 0, "two threads tokenizing at once agree");
    clip_tokenizer_free(tok);
    EXPECT_EQ(alloc_live_count(), live0);
    return harness_done();
}
