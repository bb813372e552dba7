/*
 * uuid — random version-4 UUIDs (prompt ids, WebSocket session ids, user ids).
 * Threads: any; uses the kernel's random source, no shared state.
 */
#ifndef LATENTD_UTIL_UUID_H
#define LATENTD_UTIL_UUID_H

#define UUID_STR_SIZE 37 /* 36 characters of the dashed form and the NUL */

/* Write a random UUID4 into buf (>= UUID_STR_SIZE bytes), NUL-terminated: dashed
 * "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" (prompt ids) or, with dashed = 0, the 32 hex
 * characters alone (ComfyUI's WebSocket sids). */
void uuid4_format(char *buf, int dashed);

#endif
