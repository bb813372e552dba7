/*
 * srv_req — one HTTP request as the route handlers see it, and the response helpers.
 *
 * srv_http.c fills a srv_req (method, decoded path segments, decoded query, body) and
 * calls the matching handler once the body is complete; the handler sets exactly one
 * response with a resp_* helper. Everything a request allocates is freed with it.
 * Threads: the libmicrohttpd thread that owns the connection.
 */
#ifndef LATENTD_SERVER_SRV_REQ_H
#define LATENTD_SERVER_SRV_REQ_H

#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "srv.h"

struct MHD_Connection;
struct MHD_Response;

enum srv_method {
    SRV_GET = 1 << 0,
    SRV_POST = 1 << 1,
    SRV_DELETE = 1 << 2,
    SRV_PUT = 1 << 3,
    SRV_PATCH = 1 << 4,
    SRV_HEAD = 1 << 5,
    SRV_OPTIONS = 1 << 6,
    SRV_OTHER = 1 << 7,
};

#define SRV_MAX_SEGS 32
#define SRV_MAX_QUERY 64

struct srv_req {
    struct srv *srv;                   /* borrowed */
    struct MHD_Connection *conn;       /* borrowed */
    enum srv_method method;            /* HEAD is served as GET (MHD drops the body) */
    const char *method_name;
    char *raw_url;                     /* owned: path + query as received (not decoded) */
    char *segs[SRV_MAX_SEGS];          /* owned: decoded path segments, "/api" prefix removed */
    int n_segs;
    int api_prefixed;
    int bad_path;                      /* malformed escape / NUL in the path */
    char *qk[SRV_MAX_QUERY], *qv[SRV_MAX_QUERY]; /* owned: decoded query (first wins) */
    int n_query;
    struct buf body;                   /* the request body */
    int body_too_large;

    /* Response, set by one resp_* call. */
    struct MHD_Response *resp;
    unsigned status;
};

/* Query parameter value (decoded) or NULL. */
const char *req_query(const struct srv_req *r, const char *key);
/* Request header or NULL. */
const char *req_header(const struct srv_req *r, const char *name);
/*
 * The body parsed as JSON whatever the Content-Type. Returns NULL for an empty body with
 * *empty = 1, or NULL with *empty = 0 for malformed JSON. Caller frees with cJSON_Delete.
 */
cJSON *req_json(const struct srv_req *r, int *empty);

/* application/json; charset=utf-8. Takes ownership of the JSON / the text. */
void resp_json(struct srv_req *r, unsigned status, cJSON *j);
void resp_json_text(struct srv_req *r, unsigned status, char *text /* xmalloc'ed */);
/* Empty body, application/octet-stream (ComfyUI's "empty 200"; also empty 400/403/404). */
void resp_empty(struct srv_req *r, unsigned status);
/* {"error": {"type","message","details","extra_info":{}}, "node_errors": {}} */
void resp_error(struct srv_req *r, unsigned status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Bytes (copied) with a content type. */
void resp_bytes(struct srv_req *r, unsigned status, const char *ctype, const void *p, size_t n);
/* A plain text body. */
void resp_text(struct srv_req *r, unsigned status, const char *text);
/* A file response from an open fd (ownership passes). */
void resp_fd(struct srv_req *r, unsigned status, int fd, size_t size, const char *ctype);
/* A whole-file 200, or 206/416 for a single "Range: bytes=..." request (as aiohttp's
 * FileResponse does); fd ownership passes. Adds Accept-Ranges. */
void resp_file(struct srv_req *r, int fd, size_t size, const char *ctype);
/* Add a header to the response already set. */
void resp_header(struct srv_req *r, const char *name, const char *value);

/* ---- route handlers (routes*.c) -------------------------------------------------- */

typedef void (*srv_route_fn)(struct srv_req *r);

struct srv_route {
    const char *pattern; /* "/history/X" form; a "*" segment matches exactly one segment */
    unsigned methods;    /* SRV_* mask */
    srv_route_fn fn;
    int no_api;          /* served only without the /api prefix (/internal/...) */
};

/* NULL-terminated tables. */
extern const struct srv_route srv_routes_core[];
extern const struct srv_route srv_routes_files[];
extern const struct srv_route srv_routes_user[];

/* Static files of the web root (GET/HEAD of anything no route matched). */
void srv_static_serve(struct srv_req *r);

/* Model folder table (comfy-api.md §3.11). */
extern const char *const srv_model_folders[];
/* Directories of a model folder (NULL-terminated, owned by the caller: free with
 * srv_strv_free), or NULL for an unknown folder. */
char **srv_model_folder_dirs(const struct srv_config *cfg, const char *folder);
void srv_strv_free(char **v);
/* 1 when name has a model extension for `folder`. */
int srv_model_ext_ok(const char *folder, const char *name);

#endif
