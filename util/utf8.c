#include "utf8.h"

#include <string.h>

#include "alloc.h"

size_t utf8_put(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t utf8_decode(const char *s, unsigned **out)
{
    size_t len = strlen(s), n = 0;
    unsigned *v = xmalloc((len + 1) * sizeof(unsigned));
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p, cp;
        int extra;
        if (c < 0x80) {
            cp = c;
            extra = 0;
        } else if ((c & 0xe0) == 0xc0) {
            cp = c & 0x1f;
            extra = 1;
        } else if ((c & 0xf0) == 0xe0) {
            cp = c & 0x0f;
            extra = 2;
        } else if ((c & 0xf8) == 0xf0) {
            cp = c & 0x07;
            extra = 3;
        } else {
            v[n++] = 0xFFFD;
            p++;
            continue;
        }
        if (end - p < 1 + extra) { /* truncated sequence */
            v[n++] = 0xFFFD;
            p++;
            continue;
        }
        int good = 1;
        for (int i = 1; i <= extra; i++)
            if ((p[i] & 0xc0) != 0x80)
                good = 0;
        if (!good) {
            v[n++] = 0xFFFD;
            p++;
            continue;
        }
        for (int i = 1; i <= extra; i++)
            cp = (cp << 6) | (p[i] & 0x3f);
        static const unsigned min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            cp = 0xFFFD;
        v[n++] = cp;
        p += 1 + extra;
    }
    *out = v;
    return n;
}
