/*
 * utf8 — UTF-8 to code points and back (the CLIP tokenizer's text cleaning, the
 * string nodes' Python str semantics: len, slices, case and whitespace work on
 * code points, not bytes).
 *
 * Threads: any; pure functions.
 */
#ifndef LATENTD_UTIL_UTF8_H
#define LATENTD_UTIL_UTF8_H

#include <stddef.h>

/*
 * Decode the NUL-terminated UTF-8 string `s` into *out (xmalloc'd, caller frees
 * with xfree; room for strlen(s) + 1 code points). Malformed or truncated
 * sequences, overlong forms, surrogates and values above U+10FFFF each give
 * U+FFFD. Returns the number of code points.
 */
size_t utf8_decode(const char *s, unsigned **out);

/* Encode code point `cp` (at most U+10FFFF) into out[0..4); returns the bytes written. */
size_t utf8_put(unsigned cp, char *out);

#endif
