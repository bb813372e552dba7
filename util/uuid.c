/*
 * uuid — see uuid.h.
 */
#include "uuid.h"

#include <stddef.h>
#include <sys/random.h>
#include <sys/time.h>

void uuid4_format(char *buf, int dashed)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        /* getrandom without GRND_NONBLOCK only fails before the pool is seeded at boot */
        struct timeval tv;
        gettimeofday(&tv, NULL);
        for (int i = 0; i < 16; i++)
            b[i] = (unsigned char)((tv.tv_usec * 2654435761u) >> (i % 24)) ^ (unsigned char)i;
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    static const char hex[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (dashed && (i == 4 || i == 6 || i == 8 || i == 10))
            buf[o++] = '-';
        buf[o++] = hex[b[i] >> 4];
        buf[o++] = hex[b[i] & 15];
    }
    buf[o] = '\0';
}
