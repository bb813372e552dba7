/*
 * py_re — Python's `re` module (search, finditer/findall, sub) for str patterns,
 * over PCRE2 (libpcre2-8), for the regex string nodes (nodes_string_regex.c).
 *
 * PCRE2's syntax is close to Python's; what this module adds so that the common
 * subset behaves as in CPython:
 *   - flags: a str pattern in Python is Unicode-aware, so every pattern is compiled
 *     with PCRE2_UTF | PCRE2_UCP (\w, \d, \s, \b and IGNORECASE on code points);
 *   - pattern spelling Python has and PCRE2 10.42 lacks: \Z (absolute end: PCRE2's
 *     \z), \uXXXX and \UXXXXXXXX (PCRE2's \x{...}), the quantifier {,n} ({0,n});
 *   - iteration: Python 3.7's rule for empty matches (an empty match is not allowed
 *     where the previous match ended empty, but is allowed right after a non-empty
 *     one: re.sub('x*', '-', 'abxd') == '-a-b--d-');
 *   - re.sub's replacement template: \1..\99, \g<n>, \g<name>, \n \t ... escapes,
 *     3-digit octal escapes, unmatched groups as "", and Python's errors for a bad
 *     escape of an ASCII letter or an unknown group.
 * What still differs: PCRE2 accepts syntax Python rejects (\K, \R, \h, \p{..},
 * recursion, POSIX classes [[:alpha:]], \Q..\E, possessive quantifiers before 3.11),
 * so such a pattern matches here where Python raises re.error; \N{NAME} is not
 * supported; case folding is PCRE2's simple Unicode folding (Python also matches
 * some multi-character folds only through its own tables); and error messages are
 * PCRE2's text, not Python's.
 *
 * Threads: a compiled pattern is used by one thread at a time (the executor).
 */
#ifndef LATENTD_NODES_PY_RE_H
#define LATENTD_NODES_PY_RE_H

#include <stddef.h>

#include "buf.h"

enum py_re_flags {
    PY_RE_IGNORECASE = 1 << 0,
    PY_RE_MULTILINE = 1 << 1,
    PY_RE_DOTALL = 1 << 2,
};

struct py_re; /* opaque: a compiled pattern */

/* One match: group g spans [start[g], end[g]) bytes of the subject, or start[g] < 0
 * when the group did not take part. Group 0 is the whole match. */
#define PY_RE_MAX_GROUPS 100
struct py_re_match {
    int n_groups; /* capturing groups in the pattern (Python's len(m.groups())) */
    long start[PY_RE_MAX_GROUPS + 1];
    long end[PY_RE_MAX_GROUPS + 1];
};

/*
 * Compile `pattern` (UTF-8) with `flags`. 0 and *out (free with py_re_free), or
 * ERR_INVALID with the reason appended to `why` (Python would raise re.error). A
 * pattern with more than PY_RE_MAX_GROUPS groups is refused the same way.
 */
int py_re_compile(const char *pattern, unsigned flags, struct py_re **out, struct buf *why);
void py_re_free(struct py_re *re); /* NULL is a no-op */

/* Number of capturing groups. */
int py_re_groups(const struct py_re *re);

/* Iterate matches like re.finditer over subject[0..len). Start with pos 0 and
 * prev_empty_at -1; each call advances them. */
struct py_re_iter {
    size_t pos;            /* where the next search starts */
    long prev_empty_at;    /* offset of the previous match if it was empty, else -1 */
};
/*
 * The next match: 1 and *m filled, 0 when there is none, or ERR_INVALID (a PCRE2
 * match error such as its match limit) with the reason in `why`.
 */
int py_re_next(const struct py_re *re, const char *subject, size_t len, struct py_re_iter *it,
               struct py_re_match *m, struct buf *why);

/*
 * re.sub(pattern, repl, subject, count): the result appended to `out`; count 0
 * means all. 0, or ERR_INVALID with Python's reason (a bad template: re.error) in
 * `why`, or ERR_NOT_FOUND for \g<name> naming no group (Python's IndexError).
 */
int py_re_sub(const struct py_re *re, const char *repl, const char *subject, long count,
              struct buf *out, struct buf *why);

#endif
