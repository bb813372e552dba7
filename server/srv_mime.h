/*
 * srv_mime — the Content-Type of a file served by name (/view, static files, user data).
 * Threads: any; pure.
 */
#ifndef LATENTD_SERVER_SRV_MIME_H
#define LATENTD_SERVER_SRV_MIME_H

/* Content type for a file name by its extension (case-insensitive);
 * "application/octet-stream" when unknown. Returns a string literal. */
const char *srv_mime_type(const char *name);

#endif
