/*
 * pynum — numbers written and read the way Python writes and reads them, for texts that
 * ComfyUI clients compare with what ComfyUI would have sent (validation messages, prompt
 * numbers, SaveImage metadata, prompt weights), and Python's rounding of sizes.
 * Threads: any; pure.
 */
#ifndef LATENTD_UTIL_PYNUM_H
#define LATENTD_UTIL_PYNUM_H

#include "buf.h"

/* Append repr(d) as Python prints a float: the shortest digits that read back as d,
 * fixed notation for decimal exponents in [-4, 16), else d.ddde+XX ("8.0", "0.1",
 * "1e-05", "1e+16", "inf", "-inf", "nan"). */
void pynum_format_float(double d, struct buf *out);

/* Python's float(str): surrounding whitespace, a sign, digits with single underscores
 * between digits, an exponent, inf/infinity/nan in any case; no hex. 0 and *out set,
 * or -1 (*out unspecified). */
int pynum_parse_float(const char *s, double *out);

/* Python's round(x) of a float: to the nearest integer, halves to even (as a double). */
double pynum_round_half_even(double x);

#endif
