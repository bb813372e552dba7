/*
 * HTTP side: a libmicrohttpd daemon without a listen socket (the listener hands it
 * connections whose request head is complete, with MHD_add_connection). MHD runs a small
 * pool of epoll threads, each serving many connections, so a connection costs a descriptor
 * and MHD's per-connection memory pool, never a thread (ARCHITECTURE.md "One port, two
 * libraries"); a route that blocks holds up every connection of its pool thread.
 *
 * Per request: the path is kept raw by an identity unescape callback and split on '/'
 * before each segment is percent-decoded (clients send "workflows%2Fa.json" as ONE
 * segment, comfy-api.md §1.2); the body is collected up to --max-upload-size (413 past
 * it: an early answer when Content-Length says so, else the moment the bytes received
 * pass it, and the connection is closed); then the route runs once.
 *
 * Bounds on every MHD connection, kept in a `struct http_conn` from srv_http_add to MHD's
 * CLOSED notice: caps on open connections in total and per client address (503 over
 * either), and one deadline that trickled bytes never move: the head of a keep-alive
 * connection's next request (--head-timeout after the previous response), then its body
 * (--body-timeout after the head). None runs while a route works or a response is sent:
 * MHD's idle timeout covers a client that stops reading. A sweeper thread shuts down the
 * sockets of connections past their deadline; MHD then sees end-of-file and closes them
 * itself (0.9.75 has no call to close a connection from outside its threads).
 */
#include <microhttpd.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "buf.h"
#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "srv_path.h"
#include "srv_req.h"

#define ADDR_BUCKETS 1024
#define DEFAULT_MAX_PER_ADDR 256
#define SWEEP_MS 200            /* deadline resolution */
#define UNSTARTED_MS 10000      /* a connection MHD never started is forgotten after this */
#define NO_DEADLINE INT64_MAX

/* Open connections of one client address (IPv4, or an IPv6 /64). */
struct addr_count {
    unsigned char key[16];
    int n;
    struct addr_count *next; /* hash chain */
};

/* One connection handed to MHD; guarded by srv_http.mu. */
struct http_conn {
    int fd;
    int started;             /* MHD's STARTED notice came: fd is MHD's until CLOSED */
    int64_t added_ms;
    int64_t deadline_ms;     /* NO_DEADLINE while a route runs or a response is sent */
    struct addr_count *addr; /* borrowed (owned by srv_http.addrs) */
    struct http_conn *prev, *next;
};

struct srv_http {
    struct srv *srv;
    struct MHD_Daemon *d;
    pthread_mutex_t mu;          /* guards everything below; a leaf lock */
    pthread_cond_t cv;           /* wakes the sweeper to stop */
    pthread_t sweeper;
    int sweeper_started, stopping;
    struct http_conn *conns;     /* owned: every tracked connection */
    struct http_conn **by_fd;    /* borrowed: fd -> conn until MHD starts it */
    int by_fd_cap;
    struct addr_count *addrs[ADDR_BUCKETS]; /* owned; an entry lives while n > 0 */
    int n_conns;
    int max_conns, max_per_addr;
    int head_timeout_ms, body_timeout_ms;
};

/* ---- request helpers ---------------------------------------------------------------- */

const char *req_query(const struct srv_req *r, const char *key)
{
    for (int i = 0; i < r->n_query; i++)
        if (strcmp(r->qk[i], key) == 0)
            return r->qv[i];
    return NULL;
}

const char *req_header(const struct srv_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

/* JSON whitespace; strchr would also match the string's NUL, a byte a body may hold. */
static int json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

cJSON *req_json(const struct srv_req *r, int *empty)
{
    size_t i = 0;
    while (i < r->body.len && json_ws(r->body.ptr[i]))
        i++;
    *empty = i == r->body.len;
    if (*empty)
        return NULL;
    /* Python's json.loads (what ComfyUI's aiohttp handlers call) rejects anything but
     * whitespace after the value ("Extra data"); cJSON alone would ignore it. */
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(r->body.ptr, r->body.len, &end, 0);
    if (!j)
        return NULL;
    size_t k = (size_t)(end - r->body.ptr);
    while (k < r->body.len && json_ws(r->body.ptr[k]))
        k++;
    if (k < r->body.len) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static void set_resp(struct srv_req *r, unsigned status, struct MHD_Response *resp)
{
    if (r->resp)
        MHD_destroy_response(r->resp);
    r->resp = resp;
    r->status = status;
}

/* gzip `n` bytes (zlib's gzip wrapper); NULL when zlib fails. Caller frees with xfree. */
static void *gzip_bytes(const void *p, size_t n, size_t *out_n)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    size_t cap = deflateBound(&z, (uLong)n) + 32;
    unsigned char *out = xmalloc(cap);
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    *out_n = z.total_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        xfree(out);
        return NULL;
    }
    return out;
}

/* --enable-compress-response-body: JSON and text, when the client accepts gzip. */
static int want_gzip(const struct srv_req *r, const char *ctype, size_t n)
{
    if (!r->srv->cfg->compress || n < 256 || !ctype)
        return 0;
    if (strncmp(ctype, "application/json", 16) != 0 && strncmp(ctype, "text/", 5) != 0)
        return 0;
    const char *ae = req_header(r, "Accept-Encoding");
    return ae && strstr(ae, "gzip") != NULL;
}

/*
 * The one place a body becomes a response. `p` is handed over with `fr` as its free
 * function, or copied when fr is NULL.
 */
static void set_body(struct srv_req *r, unsigned status, const char *ctype, void *p, size_t n,
                     void (*fr)(void *))
{
    int gz = 0;
    if (want_gzip(r, ctype, n)) {
        size_t zn = 0;
        void *z = gzip_bytes(p, n, &zn);
        if (z) {
            if (fr)
                fr(p);
            p = z;
            n = zn;
            fr = xfree;
            gz = 1;
        }
    }
    struct MHD_Response *resp =
        fr ? MHD_create_response_from_buffer_with_free_callback(n, p, fr)
           : MHD_create_response_from_buffer(n, n ? p : (void *)"", MHD_RESPMEM_MUST_COPY);
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (gz) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
    }
    set_resp(r, status, resp);
}

void resp_bytes(struct srv_req *r, unsigned status, const char *ctype, const void *p, size_t n)
{
    set_body(r, status, ctype, (void *)p, n, NULL);
}

void resp_json_text(struct srv_req *r, unsigned status, char *text)
{
    set_body(r, status, "application/json; charset=utf-8", text, strlen(text), xfree);
}

void resp_json(struct srv_req *r, unsigned status, cJSON *j)
{
    char *p = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    /* Handed to MHD as is (no copy); freed with cJSON's allocator. */
    set_body(r, status, "application/json; charset=utf-8", p, strlen(p), cJSON_free);
}

void resp_empty(struct srv_req *r, unsigned status)
{
    resp_bytes(r, status, "application/octet-stream", NULL, 0);
}

void resp_text(struct srv_req *r, unsigned status, const char *text)
{
    resp_bytes(r, status, "text/plain; charset=utf-8", text, strlen(text));
}

void resp_error(struct srv_req *r, unsigned status, const char *type, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "details", msg);
    cJSON_AddObjectToObject(e, "extra_info");
    cJSON_AddObjectToObject(o, "node_errors");
    resp_json(r, status, o);
}

void resp_fd(struct srv_req *r, unsigned status, int fd, size_t size, const char *ctype)
{
    struct MHD_Response *resp = MHD_create_response_from_fd(size, fd);
    if (!resp) {
        close(fd);
        resp_error(r, 500, "internal_error", "cannot send file");
        return;
    }
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    set_resp(r, status, resp);
}

/* Parse a single byte range against `size`: 1 = satisfiable range [*a, *b], 0 = no usable
 * Range header (serve everything), -1 = unsatisfiable (416). */
static int parse_range(const char *h, size_t size, size_t *a, size_t *b)
{
    if (!h || strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return 0; /* absent, another unit, or several ranges: the whole file */
    const char *p = h + 6;
    char *end;
    if (*p == '-') { /* suffix: the last N bytes */
        unsigned long long n = strtoull(p + 1, &end, 10);
        if (end == p + 1 || *end)
            return 0;
        if (n == 0 || size == 0)
            return -1;
        *a = n >= size ? 0 : size - (size_t)n;
        *b = size - 1;
        return 1;
    }
    unsigned long long s0 = strtoull(p, &end, 10);
    if (end == p || *end != '-')
        return 0;
    const char *q = end + 1;
    unsigned long long s1 = size ? size - 1 : 0;
    if (*q) {
        s1 = strtoull(q, &end, 10);
        if (end == q || *end)
            return 0;
        if (s1 >= size)
            s1 = size - 1;
    }
    if (s0 >= size || s0 > s1)
        return -1;
    *a = (size_t)s0;
    *b = (size_t)s1;
    return 1;
}

void resp_file(struct srv_req *r, int fd, size_t size, const char *ctype)
{
    size_t a = 0, b = 0;
    int rg = parse_range(req_header(r, "Range"), size, &a, &b);
    char cr[96];
    if (rg < 0) {
        close(fd);
        resp_empty(r, 416);
        snprintf(cr, sizeof(cr), "bytes */%zu", size);
        resp_header(r, "Content-Range", cr);
        return;
    }
    if (rg == 0) {
        resp_fd(r, 200, fd, size, ctype);
    } else {
        struct MHD_Response *resp =
            MHD_create_response_from_fd_at_offset64(b - a + 1, fd, (uint64_t)a);
        if (!resp) {
            close(fd);
            resp_error(r, 500, "internal_error", "cannot send file");
            return;
        }
        if (ctype)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
        set_resp(r, 206, resp);
        snprintf(cr, sizeof(cr), "bytes %zu-%zu/%zu", a, b, size);
        resp_header(r, "Content-Range", cr);
    }
    resp_header(r, "Accept-Ranges", "bytes");
}

void resp_header(struct srv_req *r, const char *name, const char *value)
{
    if (r->resp)
        MHD_add_response_header(r->resp, name, value);
}

/* ---- origin guard (comfy-api.md §1.4) ------------------------------------------------- */

/* Split "host[:port]" / "[v6]:port" into hostname and port (-1 when absent). */
static void split_hostport(const char *s, char *host, size_t hn, int *port)
{
    *port = -1;
    const char *colon;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        size_t n = end ? (size_t)(end - s - 1) : strlen(s + 1);
        snprintf(host, hn, "%.*s", (int)n, s + 1);
        colon = end && end[1] == ':' ? end + 1 : NULL;
    } else {
        colon = strrchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        snprintf(host, hn, "%.*s", (int)n, s);
    }
    if (colon && colon[1])
        *port = atoi(colon + 1);
    for (char *p = host; *p; p++)
        *p = (char)((*p >= 'A' && *p <= 'Z') ? *p + 32 : *p);
}

/*
 * ComfyUI resolves the Host name to decide whether it is loopback; a DNS lookup on an
 * HTTP thread could stall, so we treat literal loopback addresses and "localhost" (and
 * its subdomains, which resolve to loopback by RFC 6761) as loopback and any other name
 * as not.
 */
static int host_is_loopback(const char *h)
{
    unsigned char b[16];
    if (inet_pton(AF_INET, h, b) == 1)
        return b[0] == 127;
    if (inet_pton(AF_INET6, h, b) == 1) {
        static const unsigned char lo[16] = {[15] = 1};
        static const unsigned char v4map[12] = {[10] = 0xff, [11] = 0xff};
        return memcmp(b, lo, 16) == 0 || (memcmp(b, v4map, 12) == 0 && b[12] == 127);
    }
    size_t n = strlen(h);
    return strcmp(h, "localhost") == 0 || (n > 10 && strcmp(h + n - 10, ".localhost") == 0);
}

int srv_origin_allowed(const char *host, const char *origin)
{
    if (!host || !origin || !host[0] || !origin[0])
        return 1;
    /* Origin's netloc: after "scheme://", up to the next '/'. */
    const char *p = strstr(origin, "://");
    p = p ? p + 3 : origin;
    char netloc[512];
    snprintf(netloc, sizeof(netloc), "%.*s", (int)strcspn(p, "/?#"), p);
    char ohost[512], hhost[512];
    int oport, hport;
    split_hostport(netloc, ohost, sizeof(ohost), &oport);
    split_hostport(host, hhost, sizeof(hhost), &hport);
    char a[600], b[600];
    /* Compare with ports only when both sides carry one (ComfyUI's rule). */
    if (oport >= 0 && hport >= 0) {
        snprintf(a, sizeof(a), "%s:%d", hhost, hport);
        snprintf(b, sizeof(b), "%s:%d", ohost, oport);
    } else {
        snprintf(a, sizeof(a), "%s", hhost);
        snprintf(b, sizeof(b), "%s", ohost);
    }
    if (!a[0] || !b[0] || strcmp(a, b) == 0)
        return 1;
    return !host_is_loopback(hhost);
}

/* ---- connection tracking: caps and deadlines ------------------------------------------- */

/* The cap key of a client address: IPv4 as is (also when v4-mapped), IPv6 by its /64,
 * since one IPv6 host commonly owns a whole /64. */
static void addr_key(const struct sockaddr *sa, unsigned char key[16])
{
    memset(key, 0, 16);
    if (sa->sa_family == AF_INET) {
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char v4map[12] = {[10] = 0xff, [11] = 0xff};
        if (memcmp(a, v4map, 12) == 0)
            memcpy(key + 12, a + 12, 4);
        else
            memcpy(key, a, 8);
    }
}

static unsigned addr_hash(const unsigned char key[16])
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % ADDR_BUCKETS;
}

/* Under mu: the count for `key`, created at zero when absent. */
static struct addr_count *addr_get(struct srv_http *h, const unsigned char key[16])
{
    struct addr_count **b = &h->addrs[addr_hash(key)];
    for (struct addr_count *a = *b; a; a = a->next)
        if (memcmp(a->key, key, 16) == 0)
            return a;
    struct addr_count *a = xcalloc(1, sizeof(*a));
    memcpy(a->key, key, 16);
    a->next = *b;
    *b = a;
    return a;
}

/* Under mu: drop one connection from its address, freeing the entry at zero. */
static void addr_put(struct srv_http *h, struct addr_count *a)
{
    if (--a->n > 0)
        return;
    struct addr_count **p = &h->addrs[addr_hash(a->key)];
    while (*p != a)
        p = &(*p)->next;
    *p = a->next;
    xfree(a);
}

/* Under mu: remember fd -> c until MHD's STARTED notice looks it up. */
static void by_fd_set(struct srv_http *h, int fd, struct http_conn *c)
{
    if (fd >= h->by_fd_cap) {
        int cap = h->by_fd_cap ? h->by_fd_cap : 1024;
        while (cap <= fd)
            cap *= 2;
        h->by_fd = xrealloc(h->by_fd, (size_t)cap * sizeof(*h->by_fd));
        memset(h->by_fd + h->by_fd_cap, 0, (size_t)(cap - h->by_fd_cap) * sizeof(*h->by_fd));
        h->by_fd_cap = cap;
    }
    h->by_fd[fd] = c;
}

/* Under mu: forget c entirely. */
static void conn_drop(struct srv_http *h, struct http_conn *c)
{
    if (c->fd < h->by_fd_cap && h->by_fd[c->fd] == c)
        h->by_fd[c->fd] = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    addr_put(h, c->addr);
    h->n_conns--;
    xfree(c);
}

/* Under mu: NULL (and why in *why) when a connection from `key` would pass a cap. */
static struct http_conn *conn_admit(struct srv_http *h, int fd, const unsigned char key[16],
                                    const char **why)
{
    if (h->n_conns >= h->max_conns) {
        *why = "too many connections";
        return NULL;
    }
    struct addr_count *a = addr_get(h, key);
    if (a->n >= h->max_per_addr) {
        *why = "too many connections from this address";
        return NULL; /* a->n > 0, so the entry is in use: nothing to free */
    }
    struct http_conn *c = xcalloc(1, sizeof(*c));
    c->fd = fd;
    c->addr = a;
    a->n++;
    c->added_ms = clock_mono_ms();
    /* The listener saw this head complete, so the first request needs no head deadline;
     * the access handler sets the body deadline at once. */
    c->deadline_ms = NO_DEADLINE;
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    h->n_conns++;
    /* A stale entry means MHD closed that descriptor without a STARTED notice. */
    if (fd < h->by_fd_cap && h->by_fd[fd])
        conn_drop(h, h->by_fd[fd]);
    by_fd_set(h, fd, c);
    return c;
}

static struct http_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* MHD thread: the connection's next deadline is `ms` from now (NO_DEADLINE: none). */
static void conn_deadline(struct srv_http *h, struct MHD_Connection *conn, int64_t ms)
{
    struct http_conn *c = conn_of(conn);
    if (!c)
        return;
    pthread_mutex_lock(&h->mu);
    c->deadline_ms = ms == NO_DEADLINE ? NO_DEADLINE : clock_mono_ms() + ms;
    pthread_mutex_unlock(&h->mu);
}

/* MHD thread: STARTED (link MHD's connection to our record) and CLOSED (forget it). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct srv_http *h = cls;
    pthread_mutex_lock(&h->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci ? ci->connect_fd : -1;
        struct http_conn *c = fd >= 0 && fd < h->by_fd_cap ? h->by_fd[fd] : NULL;
        if (c) {
            h->by_fd[fd] = NULL;
            c->started = 1;
        }
        *socket_context = c;
    } else if (*socket_context) {
        /* MHD sends CLOSED before it closes the socket, so while a record exists under mu
         * its descriptor is still this connection's: the sweeper may shut it down. */
        conn_drop(h, *socket_context);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&h->mu);
}

/* Under mu: end connections past their deadline; forget ones MHD never started. */
static void sweep(struct srv_http *h, int64_t now)
{
    struct http_conn *c = h->conns;
    while (c) {
        struct http_conn *next = c->next;
        if (c->started && now >= c->deadline_ms) {
            /* Not close(): the descriptor is MHD's. End-of-file makes MHD close it. */
            shutdown(c->fd, SHUT_RDWR);
            c->deadline_ms = NO_DEADLINE;
        } else if (!c->started && now - c->added_ms >= UNSTARTED_MS) {
            conn_drop(h, c);
        }
        c = next;
    }
}

static void *sweeper_main(void *arg)
{
    struct srv_http *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        sweep(h, clock_mono_ms());
        struct timespec ts;
        clock_wall_deadline(&ts, SWEEP_MS);
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* The default total cap: half the descriptor limit, within [16, 16384]. */
static int default_max_conns(void)
{
    struct rlimit rl;
    long n = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        n = (long)rl.rlim_cur;
    n /= 2;
    return (int)(n < 16 ? 16 : n > 16384 ? 16384 : n);
}

/* ---- request lifecycle ------------------------------------------------------------------- */

static size_t unescape_identity(void *cls, struct MHD_Connection *c, char *s)
{
    return strlen(s);
}

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct srv_req *r = cls;
    if (r->n_query >= SRV_MAX_QUERY || !key)
        return MHD_YES;
    char *k = srv_url_decode(key, strlen(key), 1);
    char *v = srv_url_decode(value ? value : "", value ? strlen(value) : 0, 1);
    if (!k || !v) { /* undecodable parameters are ignored like unknown ones */
        xfree(k);
        xfree(v);
        return MHD_YES;
    }
    if (req_query(r, k)) { /* first occurrence wins (aiohttp's .get) */
        xfree(k);
        xfree(v);
        return MHD_YES;
    }
    r->qk[r->n_query] = k;
    r->qv[r->n_query++] = v;
    return MHD_YES;
}

static enum srv_method parse_method(const char *m)
{
    static const struct {
        const char *name;
        enum srv_method m;
    } t[] = {{"GET", SRV_GET},       {"POST", SRV_POST},   {"DELETE", SRV_DELETE},
             {"PUT", SRV_PUT},       {"PATCH", SRV_PATCH}, {"HEAD", SRV_GET},
             {"OPTIONS", SRV_OPTIONS}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcmp(m, t[i].name) == 0)
            return t[i].m;
    return SRV_OTHER;
}

static void parse_path(struct srv_req *r, const char *url)
{
    const char *p = url;
    if (strncmp(p, "/api/", 5) == 0) {
        r->api_prefixed = 1;
        p += 4;
    }
    while (*p == '/')
        p++;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (r->n_segs >= SRV_MAX_SEGS) {
            r->bad_path = 1;
            return;
        }
        char *seg = srv_url_decode(p, n, 0);
        if (!seg) {
            r->bad_path = 1;
            return;
        }
        r->segs[r->n_segs++] = seg;
        p += n;
        if (*p == '/') {
            p++;
            if (!*p) /* trailing slash: an empty last segment ("/models/" != "/models") */
                r->segs[r->n_segs++] = xstrdup("");
        }
    }
}

static void req_free(struct srv_req *r)
{
    for (int i = 0; i < r->n_segs; i++)
        xfree(r->segs[i]);
    for (int i = 0; i < r->n_query; i++) {
        xfree(r->qk[i]);
        xfree(r->qv[i]);
    }
    xfree(r->raw_url);
    buf_release(&r->body);
    if (r->resp)
        MHD_destroy_response(r->resp);
    xfree(r);
}

static int route_match(const char *pattern, const struct srv_req *r)
{
    const char *p = pattern;
    int i = 0;
    while (*p == '/')
        p++;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (i >= r->n_segs)
            return 0;
        if (!(n == 1 && p[0] == '*') &&
            (strlen(r->segs[i]) != n || memcmp(r->segs[i], p, n) != 0))
            return 0;
        i++;
        p += n;
        while (*p == '/')
            p++;
    }
    return i == r->n_segs;
}

static void dispatch(struct srv_req *r)
{
    if (r->bad_path) {
        resp_error(r, 400, "invalid_path", "malformed request path");
        return;
    }
    if (r->method == SRV_OPTIONS) {
        resp_empty(r, 200);
        return;
    }
    const struct srv_route *tables[] = {srv_routes_core, srv_routes_files, srv_routes_user};
    unsigned allowed = 0;
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        for (const struct srv_route *rt = tables[t]; rt->pattern; rt++) {
            if (rt->no_api && r->api_prefixed)
                continue;
            if (!route_match(rt->pattern, r))
                continue;
            if (rt->methods & r->method) {
                rt->fn(r);
                if (!r->resp)
                    resp_error(r, 500, "internal_error", "route produced no response");
                return;
            }
            allowed |= rt->methods;
        }
    }
    if (allowed) {
        char allow[64] = "";
        const char *names[] = {"GET", "POST", "DELETE", "PUT", "PATCH"};
        for (int i = 0; i < 5; i++)
            if (allowed & (1u << i))
                snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
                         allow[0] ? ", " : "", names[i]);
        resp_error(r, 405, "method_not_allowed", "method '%s' is not allowed for '%s'",
                   r->method_name, r->raw_url);
        resp_header(r, "Allow", allow);
        return;
    }
    if (r->method == SRV_GET && !r->api_prefixed) {
        srv_static_serve(r);
        return;
    }
    resp_error(r, 404, "not_found", "no route for '%s %s'", r->method_name, r->raw_url);
}

static enum MHD_Result send_resp(struct srv_req *r)
{
    const struct srv_config *cfg = r->srv->cfg;
    if (cfg->cors_origin) {
        MHD_add_response_header(r->resp, "Access-Control-Allow-Origin", cfg->cors_origin);
        MHD_add_response_header(r->resp, "Access-Control-Allow-Methods",
                                "POST, GET, DELETE, PUT, OPTIONS");
        MHD_add_response_header(r->resp, "Access-Control-Allow-Headers",
                                "Content-Type, Authorization");
        MHD_add_response_header(r->resp, "Access-Control-Allow-Credentials", "true");
    }
    return MHD_queue_response(r->conn, r->status, r->resp);
}

/*
 * A body (chunked, so its size was not announced) has passed --max-upload-size. MHD 0.9.75
 * accepts a response only before the body or after all of it, and a chunk size of 2^64-1
 * would keep it reading for ever; so the 413 is written here and MHD_NO makes MHD close
 * the connection. MHD is only receiving at this point, so nothing interleaves with it.
 */
static enum MHD_Result refuse_body(struct srv_http *h, struct srv_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char msg[128];
    snprintf(msg, sizeof(msg), "request body exceeds --max-upload-size (%zu bytes)",
             h->srv->cfg->max_upload_bytes);
    if (ci) {
        /* Unread bytes at MHD's close make the kernel send a reset that can overtake the
         * 413 (seen once in six CI runs): read what is already here, answer, then send the
         * FIN at once so the client has the whole answer before the reset can come. */
        char sink[4096];
        for (int i = 0; i < 16 && recv(ci->connect_fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
            ;
        srv_reply_raw(ci->connect_fd, 413, "request_too_large", msg);
        shutdown(ci->connect_fd, SHUT_WR);
    }
    r->status = 413;
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct srv_http *h = cls;
    struct srv_req *r = *con_cls;
    if (!r) {
        r = xcalloc(1, sizeof(*r));
        *con_cls = r;
        r->srv = h->srv;
        r->conn = conn;
        conn_deadline(h, conn, h->body_timeout_ms);
        r->method = parse_method(method);
        r->method_name = method;
        buf_init(&r->body);
        parse_path(r, url);
        struct buf raw;
        buf_init(&raw);
        buf_adds(&raw, url);
        r->raw_url = buf_detach(&raw, NULL);
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_query, r);
        if (!h->srv->cfg->cors_origin &&
            !srv_origin_allowed(req_header(r, "Host"), req_header(r, "Origin"))) {
            resp_empty(r, 403);
            return send_resp(r);
        }
        const char *cl = req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->srv->cfg->max_upload_bytes) {
            resp_error(r, 413, "request_too_large",
                       "request body of %s bytes exceeds --max-upload-size (%zu bytes)", cl,
                       h->srv->cfg->max_upload_bytes);
            return send_resp(r);
        }
        return MHD_YES;
    }
    if (r->resp) { /* answered early (403/413): discard whatever body still arrives */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (r->body.len + *upload_data_size > h->srv->cfg->max_upload_bytes)
            return refuse_body(h, r);
        buf_add(&r->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    conn_deadline(h, conn, NO_DEADLINE);
    dispatch(r);
    return send_resp(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct srv_http *h = cls;
    /* Keep-alive: the next request's head must be complete within the head timeout. */
    conn_deadline(h, conn, h->head_timeout_ms);
    struct srv_req *r = *con_cls;
    if (!r)
        return;
    if (log_get_level() <= LOG_DEBUG)
        log_debug("%s %s%s%s -> %u%s", r->method_name, r->raw_url, r->n_query ? "?" : "",
                  r->n_query ? "..." : "", r->status,
                  toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)");
    req_free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    log_debug("mhd: %s", line);
}

/* Worker threads: a few per core, at least 4, so that one slow route (a large upload
 * written to disk, a long history) holds up only the connections of its own thread. */
static unsigned pool_size(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 4 ? 4 : n > 16 ? 16 : (unsigned)n;
}

static void limits_init(struct srv_http *h, const struct srv_config *cfg)
{
    h->max_conns = cfg->max_connections > 0 ? cfg->max_connections : default_max_conns();
    h->max_per_addr = cfg->max_connections_per_ip > 0 ? cfg->max_connections_per_ip
                                                      : DEFAULT_MAX_PER_ADDR;
    h->head_timeout_ms = cfg->head_timeout_ms > 0 ? cfg->head_timeout_ms : SRV_HEAD_TIMEOUT_MS;
    h->body_timeout_ms = cfg->body_timeout_ms > 0 ? cfg->body_timeout_ms : SRV_BODY_TIMEOUT_MS;
}

struct srv_http *srv_http_new(struct srv *s, struct err *e)
{
    struct srv_http *h = xcalloc(1, sizeof(*h));
    h->srv = s;
    limits_init(h, s->cfg);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    /* Internal epoll threads, no thread per connection: ~1200 slow clients deadlocked
     * 0.9.75 in thread-per-connection mode (see ARCHITECTURE.md). MHD's own connection
     * limit is set above ours so that only srv_http_add refuses, with a 503. */
    h->d = MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, h,
                            MHD_OPTION_THREAD_POOL_SIZE, pool_size(),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * h->max_conns + 64),
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape_identity, NULL,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_END);
    if (!h->d) {
        err_set(e, ERR_INTERNAL, "cannot start the HTTP daemon");
        goto fail;
    }
    if (pthread_create(&h->sweeper, NULL, sweeper_main, h) != 0) {
        err_set(e, ERR_INTERNAL, "cannot start the HTTP deadline thread");
        goto fail;
    }
    h->sweeper_started = 1;
    return h;
fail:
    srv_http_free(h);
    return NULL;
}

void srv_http_free(struct srv_http *h)
{
    if (!h)
        return;
    if (h->sweeper_started) {
        pthread_mutex_lock(&h->mu);
        h->stopping = 1;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->sweeper, NULL);
    }
    if (h->d)
        MHD_stop_daemon(h->d); /* sends CLOSED for every connection: the list empties */
    while (h->conns)
        conn_drop(h, h->conns);
    xfree(h->by_fd);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    xfree(h);
}

void srv_http_add(struct srv_http *h, int fd, const struct sockaddr *sa, socklen_t len)
{
    unsigned char key[16];
    const char *why = NULL;
    addr_key(sa, key);
    pthread_mutex_lock(&h->mu);
    struct http_conn *c = conn_admit(h, fd, key, &why);
    pthread_mutex_unlock(&h->mu);
    if (!c) {
        log_debug("http: refusing a connection: %s", why);
        srv_reply_close(fd, 503, "server_busy", why);
        return;
    }
    if (MHD_add_connection(h->d, fd, sa, len) != MHD_YES) {
        /* MHD closes the socket itself on failure (documented for 0.9.x). */
        log_warn("http: cannot add connection (too many?)");
        pthread_mutex_lock(&h->mu);
        conn_drop(h, c);
        pthread_mutex_unlock(&h->mu);
    }
}
