/*
 * The listener: one port for HTTP and WebSocket (ARCHITECTURE.md "One port, two
 * libraries").
 *
 * DESIGN
 * A single thread waits (epoll) on the listening sockets and on every accepted socket whose
 * request head has not fully arrived ("pending"). It never consumes a byte of a head: it
 * peeks (MSG_PEEK), so the socket is handed over untouched and the library that adopts it
 * parses the request itself. A complete head (blank line seen) is classified: an `Upgrade:
 * websocket` request for /ws or /api/ws goes to libwebsockets, anything else to
 * libmicrohttpd.
 * Pending sockets are registered edge-triggered: a peeked socket stays readable, so a
 * level-triggered wait would spin, while an edge fires once per arriving segment. That is
 * what makes thousands of trickling clients cheap (one descriptor and one small record
 * each, no thread, no timer of their own).
 * Bounds, all answered with a short JSON error and a close, never handed on:
 *   - the head must be complete within head_timeout_ms of the accept, however the bytes
 *     trickle (408); all pending sockets share that timeout, so the accept-ordered list is
 *     also the deadline-ordered list and expiry only looks at its front;
 *   - a head that fills PEEK_MAX bytes without ending is too large (431);
 *   - at max_pending the oldest pending socket is closed (503) to make room, so a flood of
 *     slow heads can never keep a fresh client, whose head arrives whole, from being served;
 *   - a WebSocket upgrade without a usable Sec-WebSocket-Key/Version gets 400 here, because
 *     libwebsockets would close it without an HTTP answer.
 * EMFILE/ENFILE: a reserve descriptor is closed to accept and immediately close the
 * waiting connection (so clients get a reset instead of hanging), the listening sockets
 * are paused for a moment, and the reserve is reopened.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "srv.h"

#define PEEK_MAX 16384          /* bytes: the largest request head accepted */
#define EMFILE_PAUSE_MS 100
#define EVICT_LOG_MS 1000       /* at most one "too many pending" line per second */
#define TAG_WAKE 1              /* epoll data.u64 of the wake pipe; listening socket i is */
#define TAG_LISTEN 2            /* TAG_LISTEN + i; anything larger is a struct pending * */

struct pending {
    int fd;
    struct sockaddr_storage sa;
    socklen_t salen;
    int64_t deadline_ms;
    struct pending *prev, *next; /* accept order (= deadline order) */
};

struct srv_listener {
    int fds[SRV_MAX_LISTEN];
    int n_fds;
    int port;
    int wake[2]; /* pipe: stop */
    int ep;      /* epoll set: wake pipe, listening sockets (level), pending (edge) */
    int reserve_fd;
    pthread_t thread;
    int started;
    atomic_int stop;
    struct srv_listen_handlers h;
    struct pending *oldest, *newest; /* owned */
    int n_pend;
    int max_pend;
    int head_timeout_ms;
    int listening; /* 0 while paused after EMFILE */
    int64_t paused_until_ms;
    int64_t evict_logged_ms;
};

/* ---- canned answers -------------------------------------------------------------------- */

static const char *reason_of(unsigned status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

void srv_reply_raw(int fd, unsigned status, const char *type, const char *message)
{
    char body[512], msg[1024];
    int bn = snprintf(body, sizeof(body),
                      "{\"error\":{\"type\":\"%s\",\"message\":\"%s\",\"details\":\"%s\","
                      "\"extra_info\":{}},\"node_errors\":{}}",
                      type, message, message);
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json; charset=utf-8\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                     status, reason_of(status), bn, body);
    /* A fresh socket's send buffer takes these few hundred bytes at once; a client that
     * does not even read that much gets nothing, which is fine for an error. */
    ssize_t w = send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
}

void srv_reply_close(int fd, unsigned status, const char *type, const char *message)
{
    /* Read what the client already sent: closing with unread bytes makes the kernel send
     * a reset, which can overtake the answer on its way to the client. */
    char sink[4096];
    for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
        ;
    srv_reply_raw(fd, status, type, message);
    shutdown(fd, SHUT_WR);
    close(fd);
}

/* ---- sockets ------------------------------------------------------------------------------ */

static int bind_one(const char *addr, int port, int *bound_port, struct err *e)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int rc = getaddrinfo(addr, ps, &hints, &res);
    if (rc != 0)
        return err_set(e, ERR_INVALID, "cannot resolve listen address '%s': %s", addr,
                       gai_strerror(rc));
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        freeaddrinfo(res);
        return err_set(e, ERR_IO, "cannot create socket for '%s': %s", addr, strerror(errno));
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (res->ai_family == AF_INET6) /* "0.0.0.0,::" must not collide */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    /* A deep backlog: a burst of thousands of connects must wait in the kernel, not be
     * refused, while the listener drains it 64 at a time. */
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 4096) < 0) {
        int er = errno;
        freeaddrinfo(res);
        close(fd);
        return err_set(e, ERR_IO, "cannot listen on '%s' port %d: %s", addr, port, strerror(er));
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* The default pending cap: a quarter of the descriptor limit (the rest is for handed-over
 * connections, WebSockets, files and the database), within [16, 8192]. */
static int default_max_pending(void)
{
    struct rlimit rl;
    long n = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        n = (long)rl.rlim_cur;
    n /= 4;
    return (int)(n < 16 ? 16 : n > 8192 ? 8192 : n);
}

static int ep_add(int ep, int fd, uint32_t events, uint64_t data)
{
    struct epoll_event ev = {.events = events, .data.u64 = data};
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

struct srv_listener *srv_listen_new(char *const *addrs, int n_addrs, int port, struct err *e)
{
    struct srv_listener *l = xcalloc(1, sizeof(*l));
    l->wake[0] = l->wake[1] = -1;
    l->reserve_fd = -1;
    l->ep = -1;
    l->head_timeout_ms = SRV_HEAD_TIMEOUT_MS;
    l->max_pend = default_max_pending();
    l->listening = 1;
    for (int i = 0; i < n_addrs && i < SRV_MAX_LISTEN; i++) {
        int bound = 0;
        struct err e1 = {0};
        /* With port 0 the first socket picks the port and the others share it. */
        int fd = bind_one(addrs[i], l->n_fds ? l->port : port, &bound, &e1);
        if (fd < 0) {
            /* One address of several may be unusable (no IPv6 on this host for the bare
             * --listen's "::"): serve on the others, fail only when none works. */
            log_warn("listener: %s", e1.msg);
            if (e && !e->code)
                err_set(e, e1.code, "%s", e1.msg);
            continue;
        }
        l->fds[l->n_fds++] = fd;
        l->port = bound;
    }
    if (l->n_fds == 0)
        goto fail;
    if (e)
        err_clear(e);
    if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0 || (l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        err_set(e, ERR_IO, "cannot create the listener's pipe or epoll set: %s", strerror(errno));
        goto fail;
    }
    if (ep_add(l->ep, l->wake[0], EPOLLIN, TAG_WAKE) < 0)
        goto fail_ep;
    for (int i = 0; i < l->n_fds; i++)
        if (ep_add(l->ep, l->fds[i], EPOLLIN, TAG_LISTEN + (uint64_t)i) < 0)
            goto fail_ep;
    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return l;
fail_ep:
    err_set(e, ERR_IO, "cannot register with the listener's epoll set: %s", strerror(errno));
fail:
    srv_listen_free(l);
    return NULL;
}

void srv_listen_configure(struct srv_listener *l, const struct srv_config *cfg)
{
    if (cfg->head_timeout_ms > 0)
        l->head_timeout_ms = cfg->head_timeout_ms;
}

int srv_listen_port(const struct srv_listener *l)
{
    return l->port;
}

/* ---- classifying a head --------------------------------------------------------------- */

/* Case-insensitive search within n bytes. */
static const char *find_ci(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (strncasecmp(hay + i, needle, m) == 0)
            return hay + i;
    return NULL;
}

/* The value of header `name` ("\nname:" form) with spaces trimmed, as a span; NULL when
 * absent. */
static const char *header_value(const char *h, size_t n, const char *name, size_t *len)
{
    const char *u = find_ci(h, n, name);
    if (!u)
        return NULL;
    const char *v = u + strlen(name), *end = h + n;
    const char *eol = memchr(v, '\n', (size_t)(end - v));
    if (!eol)
        eol = end;
    while (v < eol && (*v == ' ' || *v == '\t'))
        v++;
    const char *w = eol;
    while (w > v && (w[-1] == '\r' || w[-1] == ' ' || w[-1] == '\t'))
        w--;
    *len = (size_t)(w - v);
    return v;
}

/* 1 when the head is a WebSocket upgrade for /ws or /api/ws. */
static int head_is_ws(const char *h, size_t n)
{
    if (n < 4 || memcmp(h, "GET ", 4) != 0)
        return 0;
    const char *p = h + 4;
    size_t rest = n - 4;
    int path_ok = 0;
    if (rest >= 3 && memcmp(p, "/ws", 3) == 0 && (rest == 3 || strchr(" ?", p[3])))
        path_ok = 1;
    if (rest >= 7 && memcmp(p, "/api/ws", 7) == 0 && (rest == 7 || strchr(" ?", p[7])))
        path_ok = 1;
    if (!path_ok)
        return 0;
    size_t len = 0;
    const char *u = header_value(h, n, "\nupgrade:", &len);
    return u && find_ci(u, len, "websocket") != NULL;
}

/* NULL when a WebSocket upgrade head carries what RFC 6455 §4.2.1 requires of the key and
 * version, else why not. */
static const char *ws_head_problem(const char *h, size_t n)
{
    size_t len = 0;
    const char *v = header_value(h, n, "\nsec-websocket-key:", &len);
    if (!v || len == 0)
        return "websocket upgrade without Sec-WebSocket-Key";
    v = header_value(h, n, "\nsec-websocket-version:", &len);
    if (!v || len != 2 || memcmp(v, "13", 2) != 0)
        return "unsupported Sec-WebSocket-Version (13 is required)";
    return NULL;
}

/* Where the head ends (blank line), or 0 while it is incomplete. */
static size_t head_end(const char *h, size_t n)
{
    const char *a = memmem(h, n, "\r\n\r\n", 4), *b = memmem(h, n, "\n\n", 2);
    if (!a && !b)
        return 0;
    if (a && (!b || a < b))
        return (size_t)(a - h) + 4;
    return (size_t)(b - h) + 2;
}

/* ---- pending sockets ----------------------------------------------------------------- */

/* Unlink p from the pending list and the epoll set and free it; the socket stays open. */
static void pend_forget(struct srv_listener *l, struct pending *p)
{
    epoll_ctl(l->ep, EPOLL_CTL_DEL, p->fd, NULL);
    if (p->prev)
        p->prev->next = p->next;
    else
        l->oldest = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        l->newest = p->prev;
    l->n_pend--;
    xfree(p);
}

static void pend_reply_close(struct srv_listener *l, struct pending *p, unsigned status,
                             const char *type, const char *message)
{
    int fd = p->fd;
    pend_forget(l, p);
    srv_reply_close(fd, status, type, message);
}

static void pend_close(struct srv_listener *l, struct pending *p)
{
    int fd = p->fd;
    pend_forget(l, p);
    close(fd);
}

/* Hand a complete head over (or refuse a broken WebSocket handshake). */
static void pend_dispatch(struct srv_listener *l, struct pending *p, const char *head, size_t n)
{
    struct sockaddr_storage sa = p->sa;
    socklen_t salen = p->salen;
    int fd = p->fd;
    if (head_is_ws(head, n)) {
        const char *why = ws_head_problem(head, n);
        if (why) {
            pend_reply_close(l, p, 400, "bad_request", why);
            return;
        }
        pend_forget(l, p);
        l->h.ws(l->h.user, fd);
        return;
    }
    pend_forget(l, p);
    l->h.http(l->h.user, fd, (struct sockaddr *)&sa, salen);
}

/* Peek at one pending socket after an event (`hup`: the peer closed its side). */
static void pend_check(struct srv_listener *l, struct pending *p, int hup)
{
    char head[PEEK_MAX];
    ssize_t n = recv(p->fd, head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        pend_close(l, p); /* the client vanished before sending a request */
        return;
    }
    if (n < 0)
        return;
    size_t end = head_end(head, (size_t)n);
    if (end)
        pend_dispatch(l, p, head, end);
    else if (n == (ssize_t)sizeof(head))
        pend_reply_close(l, p, 431, "request_too_large", "request head too large");
    else if (hup)
        pend_reply_close(l, p, 400, "bad_request", "request head cut short");
}

/* Close pending sockets whose head deadline has passed (they are at the front). */
static void pend_expire(struct srv_listener *l, int64_t now)
{
    while (l->oldest && l->oldest->deadline_ms <= now) {
        struct pending *p = l->oldest;
        char c;
        /* A socket that never sent a byte gets no answer: there is no request to answer. */
        if (recv(p->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
            pend_reply_close(l, p, 408, "request_timeout", "request head not complete in time");
        else
            pend_close(l, p);
    }
}

/* Make room for one more pending socket by closing the oldest. */
static void pend_evict(struct srv_listener *l, int64_t now)
{
    if (now - l->evict_logged_ms >= EVICT_LOG_MS) {
        log_warn("listener: too many pending connections (%d); closing the oldest", l->n_pend);
        l->evict_logged_ms = now;
    }
    pend_reply_close(l, l->oldest, 503, "server_busy", "too many incomplete requests");
}

static void listen_pause(struct srv_listener *l, int64_t now)
{
    l->paused_until_ms = now + EMFILE_PAUSE_MS;
    if (!l->listening)
        return;
    for (int i = 0; i < l->n_fds; i++) {
        struct epoll_event ev = {.events = 0, .data.u64 = TAG_LISTEN + (uint64_t)i};
        epoll_ctl(l->ep, EPOLL_CTL_MOD, l->fds[i], &ev);
    }
    l->listening = 0;
}

static void listen_resume(struct srv_listener *l)
{
    for (int i = 0; i < l->n_fds; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN + (uint64_t)i};
        epoll_ctl(l->ep, EPOLL_CTL_MOD, l->fds[i], &ev);
    }
    l->listening = 1;
}

/* EMFILE/ENFILE: shed the waiting connection with the reserve descriptor, then pause. */
static void accept_exhausted(struct srv_listener *l, int lfd, int64_t now)
{
    log_warn("listener: out of file descriptors; dropping a connection");
    if (l->reserve_fd >= 0) {
        close(l->reserve_fd);
        int tmp = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (tmp >= 0)
            close(tmp);
        l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    listen_pause(l, now);
}

static void accept_some(struct srv_listener *l, int lfd, int64_t now)
{
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        int fd = accept4(lfd, (struct sockaddr *)&sa, &salen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                return;
            if (errno == EMFILE || errno == ENFILE) {
                accept_exhausted(l, lfd, now);
                return;
            }
            log_warn("listener: accept failed: %s", strerror(errno));
            listen_pause(l, now);
            return;
        }
        if (l->n_pend >= l->max_pend)
            pend_evict(l, now);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct pending *p = xcalloc(1, sizeof(*p));
        p->fd = fd;
        p->sa = sa;
        p->salen = salen;
        p->deadline_ms = now + l->head_timeout_ms;
        p->prev = l->newest;
        if (l->newest)
            l->newest->next = p;
        else
            l->oldest = p;
        l->newest = p;
        l->n_pend++;
        if (ep_add(l->ep, fd, EPOLLIN | EPOLLRDHUP | EPOLLET, (uint64_t)(uintptr_t)p) < 0) {
            pend_close(l, p);
            continue;
        }
        /* Most clients send the head with the connect; try at once. */
        pend_check(l, p, 0);
    }
}

static int wait_timeout_ms(const struct srv_listener *l, int64_t now)
{
    int64_t t = -1;
    if (l->oldest)
        t = l->oldest->deadline_ms - now;
    if (!l->listening && (t < 0 || l->paused_until_ms - now < t))
        t = l->paused_until_ms - now;
    return t < 0 ? (l->oldest || !l->listening ? 0 : -1) : (int)t;
}

static void *listen_main(void *arg)
{
    struct srv_listener *l = arg;
    enum { MAX_EVENTS = 256 };
    struct epoll_event ev[MAX_EVENTS];
    while (!atomic_load(&l->stop)) {
        int64_t now = clock_mono_ms();
        if (!l->listening && now >= l->paused_until_ms)
            listen_resume(l);
        int n = epoll_wait(l->ep, ev, MAX_EVENTS, wait_timeout_ms(l, now));
        if (n < 0 && errno != EINTR) {
            log_error("listener: epoll_wait failed: %s", strerror(errno));
            break;
        }
        now = clock_mono_ms();
        /* Pending sockets first: accepting may evict (free) a pending record that also has
         * an event in this batch. */
        for (int i = 0; i < n; i++)
            if (ev[i].data.u64 >= TAG_LISTEN + SRV_MAX_LISTEN)
                pend_check(l, (struct pending *)(uintptr_t)ev[i].data.u64,
                           (ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
        for (int i = 0; i < n; i++) {
            uint64_t tag = ev[i].data.u64;
            if (tag == TAG_WAKE)
                return NULL;
            if (tag >= TAG_LISTEN && tag < TAG_LISTEN + SRV_MAX_LISTEN && l->listening)
                accept_some(l, l->fds[tag - TAG_LISTEN], now);
        }
        pend_expire(l, now);
    }
    return NULL;
}

int srv_listen_start(struct srv_listener *l, const struct srv_listen_handlers *h, struct err *e)
{
    l->h = *h;
    if (pthread_create(&l->thread, NULL, listen_main, l) != 0)
        return err_set(e, ERR_INTERNAL, "cannot start the listener thread");
    l->started = 1;
    return 0;
}

void srv_listen_free(struct srv_listener *l)
{
    if (!l)
        return;
    if (l->started) {
        atomic_store(&l->stop, 1);
        ssize_t w = write(l->wake[1], "x", 1);
        (void)w;
        pthread_join(l->thread, NULL);
    }
    while (l->oldest)
        pend_close(l, l->oldest);
    for (int i = 0; i < l->n_fds; i++)
        close(l->fds[i]);
    if (l->ep >= 0)
        close(l->ep);
    if (l->wake[0] >= 0)
        close(l->wake[0]);
    if (l->wake[1] >= 0)
        close(l->wake[1]);
    if (l->reserve_fd >= 0)
        close(l->reserve_fd);
    xfree(l);
}
