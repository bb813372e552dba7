/*
 * bytesize — byte counts as people write them on a command line.
 *
 * "1073741824", "512M", "1.5GiB", ".5G", "64k", "2T": a non-negative decimal number, an
 * optional K/M/G/T suffix (powers of 1024, any case), an optional "i" after it and an
 * optional trailing "B"/"b". Threads: any; pure.
 */
#ifndef LATENTD_UTIL_BYTESIZE_H
#define LATENTD_UTIL_BYTESIZE_H

#include <stddef.h>

/* Parse `s` into *out (bytes). 0, or ERR_INVALID (empty, no leading digit, unknown
 * suffix, trailing text, 2^64 or more); *out is untouched on error. */
int bytesize_parse(const char *s, size_t *out);

#endif
