/*
 * fuzz_tokenizer — the CLIP tokenizer and ComfyUI's prompt syntax (models/clip_tokenizer.h):
 * clip_prompt_parse, clip_tokenizer_encode and clip_tokenize_prompt over the input as
 * prompt text (any bytes: invalid UTF-8 must be tolerated, never over-read).
 *
 * The tokenizer (vocab.json + merges.txt from the source tree, ~1 s to load) is loaded
 * once; its embedding directory is a temporary folder holding two tiny textual-inversion
 * files, "emb" ([2, 768] F32) and "odd" ([3] F16, another width), so that `embedding:emb`
 * and `embedding:odd` in a prompt reach the vector path and the width-mismatch path.
 *
 * Contract checked: segments carry text; encode gives ids in the vocabulary; a tokenized
 * prompt has >= 1 chunk of 77 tokens, each starting with BOS, holding an EOS, with ids in
 * the vocabulary or naming a loaded embedding vector, weights filled in.
 * Weights are not checked for NaN: "(a:nan)" gives a NaN weight in ComfyUI too (Python's
 * float('nan')), and we match it.
 * The BPE cache keeps entries between inputs by design, so there is no per-input
 * alloc_live_count() balance here: LeakSanitizer checks leaks instead.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "clip_tokenizer.h"
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static struct clip_tokenizer *tok;
static char emb_dir[64];

static void write_embedding(const char *name, enum st_dtype dt, int ndim, const int64_t *shape,
                            size_t nbytes)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s.safetensors", emb_dir, name);
    struct st_writer *w = st_writer_new();
    st_writer_add(w, "emb_params", dt, ndim, shape);
    uint8_t *bytes = xcalloc(1, nbytes);
    for (size_t i = 0; i < nbytes; i++)
        bytes[i] = (uint8_t)(i * 7u); /* finite values for F32 and F16 alike (exponents vary) */
    struct err e = {0};
    FUZZ_CHECK(st_writer_begin(w, path, &e) == 0);
    FUZZ_CHECK(st_writer_write(w, bytes, nbytes, &e) == 0);
    FUZZ_CHECK(st_writer_finish(w, &e) == 0);
    st_writer_free(w);
    xfree(bytes);
}

static void teardown(void)
{
    clip_tokenizer_free(tok);
    tok = NULL;
    char path[128];
    snprintf(path, sizeof(path), "%s/emb.safetensors", emb_dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/odd.safetensors", emb_dir);
    unlink(path);
    rmdir(emb_dir);
}

static void setup(void)
{
    fuzz_quiet_logs();
    struct err e = {0};
    if (clip_tokenizer_load(NULL, &tok, &e) < 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", e.msg);
        abort();
    }
    snprintf(emb_dir, sizeof(emb_dir), "/tmp/latentd-fuzz-emb-XXXXXX");
    FUZZ_CHECK(mkdtemp(emb_dir) != NULL);
    int64_t s2[2] = {2, 768}, s1[1] = {3};
    write_embedding("emb", ST_DTYPE_F32, 2, s2, 2 * 768 * 4);
    write_embedding("odd", ST_DTYPE_F16, 1, s1, 3 * 2);
    clip_tokenizer_set_embedding_dir(tok, emb_dir);
    atexit(teardown);
}

static void check_parse(const char *s)
{
    struct clip_segment *segs = NULL;
    size_t nseg = 0;
    clip_prompt_parse(s, &segs, &nseg);
    for (size_t i = 0; i < nseg; i++)
        FUZZ_CHECK(segs[i].text != NULL);
    clip_segments_free(segs, nseg);
}

static void check_encode(const char *s)
{
    int32_t *ids = NULL;
    size_t nid = 0;
    clip_tokenizer_encode(tok, s, &ids, &nid);
    int vocab = clip_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < nid; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
    xfree(ids);
}

static void check_prompt(const char *s)
{
    struct clip_tokens t;
    memset(&t, 0, sizeof(t));
    clip_tokenize_prompt(tok, s, &t);
    FUZZ_CHECK(t.n_chunks >= 1 && t.ids && t.weights);
    FUZZ_CHECK(t.n_embeds >= 0 && (t.n_embeds == 0 || (t.embeds && t.embed_width > 0)));
    int vocab = clip_tokenizer_vocab_size(tok);
    for (int c = 0; c < t.n_chunks; c++) {
        const int32_t *ids = t.ids + (size_t)c * CLIP_CHUNK_LEN;
        FUZZ_CHECK(ids[0] == CLIP_TOKEN_BOS);
        int seen_end = 0;
        for (int j = 0; j < CLIP_CHUNK_LEN; j++) {
            int32_t id = ids[j];
            if (id >= CLIP_EMBED_ID_BASE)
                FUZZ_CHECK(id - CLIP_EMBED_ID_BASE < t.n_embeds);
            else
                FUZZ_CHECK(id >= 0 && id < vocab);
            seen_end |= j > 0 && id == CLIP_TOKEN_EOS;
        }
        FUZZ_CHECK(seen_end);
    }
    clip_tokens_release(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!tok)
        setup();
    if (n > 16384)
        return 0; /* prompts are short; long inputs only slow the fuzzer down */
    char *s = fuzz_strndup(data, n);
    check_parse(s);
    check_encode(s);
    check_prompt(s);
    xfree(s);
    return 0;
}
