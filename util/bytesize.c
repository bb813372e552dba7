/*
 * bytesize — see bytesize.h.
 */
#include "bytesize.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "err.h"

int bytesize_parse(const char *s, size_t *out)
{
    /* A leading digit (or ".5") keeps out what strtod would also take: spaces, signs,
     * "inf", hex. */
    if (!s || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
        return ERR_INVALID;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return ERR_INVALID;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return ERR_INVALID;
    double bytes = v * mul;
    if (bytes >= 18446744073709551615.0)
        return ERR_INVALID;
    *out = (size_t)bytes;
    return 0;
}
