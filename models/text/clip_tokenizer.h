/*
 * clip_tokenizer — the CLIP BPE tokenizer and ComfyUI's prompt handling for SD1.x
 * (sd15.md §2.1-2.8).
 *
 * Layers, bottom up:
 *   - clip_tokenizer_encode(): one text -> BPE ids, without start/end tokens:
 *     normalisation (§2.2), pre-tokenisation (§2.3), byte characters (§2.4), BPE
 *     with merge ranks (§2.5);
 *   - clip_prompt_parse(): ComfyUI's emphasis syntax -> weighted segments (§2.6):
 *     `(a)` x1.1, `(a:1.5)`, `[a]` is plain text in ComfyUI (no de-emphasis),
 *     `\(` `\)` escapes, `embedding:NAME` pieces split off;
 *   - clip_tokenize_prompt(): segments -> token groups -> 77-token chunks (§2.7)
 *     with one weight per token, and the "has weights" flag (§2.8).
 *
 * Unicode: character classes, lower-casing and canonical composition come from
 * tables generated from the Unicode Character Database (clip_unicode_tables.h,
 * tools/gen_unicode_tables.py). Two documented shortcuts: NFC composes in
 * place without first decomposing (identical for text that is NFC already or
 * NFD/base+marks, which is what prompts contain), and Greek final-sigma
 * context lower-casing is not applied (Σ always becomes σ).
 *
 * Textual-inversion embeddings: an `embedding:NAME` piece loads NAME.safetensors
 * (or NAME) from the directory set with clip_tokenizer_set_embedding_dir(): the
 * tensor "emb_params", else "clip_l", else the file's only tensor, shaped [n, width]
 * or [width]; its n vectors become n tokens (ids CLIP_EMBED_ID_BASE + k, vectors in
 * clip_tokens.embeds) carrying the segment's weight. A missing or unreadable
 * embedding is logged as a warning and skipped, the text after the name is
 * tokenized normally (ComfyUI's behaviour). Pickle embeddings (.pt) are not read.
 *
 * Data files: vocab.json and merges.txt (models/data/sd1_tokenizer/). The
 * directory is, in order: the `dir` argument, $LATENTD_TOKENIZER_DIR,
 * <dir of the executable>/../share/latentd/sd1_tokenizer,
 * <dir of the executable>/../models/data/sd1_tokenizer, then the source-tree path
 * compiled in.
 *
 * Threads: a loaded tokenizer is immutable except for its BPE cache, which is
 * behind a mutex, so any thread may tokenize concurrently.
 */
#ifndef LATENTD_MODELS_CLIP_TOKENIZER_H
#define LATENTD_MODELS_CLIP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define CLIP_TOKEN_BOS 49406
#define CLIP_TOKEN_EOS 49407
#define CLIP_TOKEN_PAD 49407 /* ComfyUI pads SD1.x prompts with the end token */
#define CLIP_CHUNK_LEN 77
#define CLIP_EMBED_ID_BASE 0x40000000 /* ids >= this index clip_tokens.embeds */

struct clip_tokenizer; /* opaque */

/*
 * Load vocab.json and merges.txt from `dir` (NULL: the search order above).
 * Returns 0 and a tokenizer (caller frees with clip_tokenizer_free), or ERR_NOT_FOUND /
 * ERR_INVALID with a message naming the file.
 */
int clip_tokenizer_load(const char *dir, struct clip_tokenizer **out, struct err *e);
void clip_tokenizer_free(struct clip_tokenizer *t);

/* Directory of textual-inversion embeddings (copied; NULL = none). Call before the
 * tokenizer is shared between threads. */
void clip_tokenizer_set_embedding_dir(struct clip_tokenizer *t, const char *dir);

/* Vocabulary size (49408) and the id of a token string, or -1. */
int clip_tokenizer_vocab_size(const struct clip_tokenizer *t);
int clip_tokenizer_token_id(const struct clip_tokenizer *t, const char *token);

/*
 * BPE-encode `text` (UTF-8; invalid bytes are treated as U+FFFD and dropped) without
 * start/end tokens. *ids is a new array (caller frees with xfree) of *n ids.
 */
void clip_tokenizer_encode(struct clip_tokenizer *t, const char *text, int32_t **ids, size_t *n);

/* One weighted piece of a prompt (§2.6). */
struct clip_segment {
    char *text;    /* owned; escapes resolved */
    double weight; /* as Python computes it (double, e.g. 1.1*1.1) */
};

/* Parse ComfyUI emphasis syntax. *segs is a new array of *n segments; free with
 * clip_segments_free. Never fails: malformed syntax is literal text, as in ComfyUI. */
void clip_prompt_parse(const char *prompt, struct clip_segment **segs, size_t *n);
void clip_segments_free(struct clip_segment *segs, size_t n);

/* A prompt packed into 77-token chunks. */
struct clip_tokens {
    int n_chunks;
    int32_t *ids;    /* owned: n_chunks * 77 */
    uint8_t *pad;    /* owned: n_chunks * 77, 1 where ids holds padding (CLIP_TOKEN_PAD after
                      * a chunk's end token), which an encoder may pad with another id */
    float *weights;  /* owned: n_chunks * 77 (float32 as ComfyUI applies them) */
    int has_weights; /* any weight != 1.0 (§2.8) */
    int n_embedding_skipped; /* embedding:NAME pieces not found (warned about, skipped) */
    float *embeds;           /* owned: n_embeds * embed_width floats (textual inversion) */
    int n_embeds;
    int embed_width; /* 0 when no embedding was loaded */
};

/* Tokenize a whole prompt (§2.6-2.8). Fills *out (release with clip_tokens_release). */
void clip_tokenize_prompt(struct clip_tokenizer *t, const char *prompt, struct clip_tokens *out);
void clip_tokens_release(struct clip_tokens *tk);

/*
 * Append chunks of the tokenized empty prompt ([start, end, end x 75], weight 1) until
 * tk has n_chunks (CLIPTextEncodeSDXL evens out its two lists so, sdxl.md §4.7).
 */
void clip_tokens_pad_chunks(struct clip_tokens *tk, int n_chunks);

/*
 * tk's ids with every padding position set to pad_id (OpenCLIP bigG pads with 0,
 * sdxl.md §4.1); end tokens the prompt itself spelled (<|endoftext|>) and the end token
 * closing each chunk stay. out: n_chunks * 77 ids.
 */
void clip_tokens_padded_ids(const struct clip_tokens *tk, int32_t pad_id, int32_t *out);

#endif
