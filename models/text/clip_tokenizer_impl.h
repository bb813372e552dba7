/*
 * Private to clip_tokenizer.c / clip_prompt.c: what the prompt layer needs from the
 * tokenizer object.
 */
#ifndef LATENTD_MODELS_CLIP_TOKENIZER_IMPL_H
#define LATENTD_MODELS_CLIP_TOKENIZER_IMPL_H

#include "clip_tokenizer.h"

/* The embedding directory, or NULL. Borrowed from the tokenizer. */
const char *clip__embedding_dir(const struct clip_tokenizer *t);

#endif
