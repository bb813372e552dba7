/*
 * The listener: one port for HTTP and WebSocket (ARCHITECTURE.md "One port, two
 * libraries").
 *
 * DESIGN
 * A single thread polls the listening sockets and every accepted socket whose request head
 * has not fully arrived. It never reads: it peeks (MSG_PEEK), so the socket is handed over
 * untouched, and the library that adopts it parses the request itself. A head that is
 * complete (blank line seen) or fills the peek buffer is classified: an `Upgrade:
 * websocket` request for /ws or /api/ws goes to libwebsockets, anything else to
 * libmicrohttpd.
 * Slow clients cannot stall the acceptor: a socket with a partial head is re-polled with
 * the others, never waited on. Because a peeked socket stays readable, a socket whose
 * peek found no new bytes is parked for PARK_MS instead of being polled (otherwise poll
 * would spin). A head that is not complete within HEAD_DEADLINE_MS is handed to
 * libmicrohttpd, whose own timeout then deals with the client.
 * EMFILE/ENFILE: a reserve descriptor is closed to accept and immediately close the
 * waiting connection (so clients get a reset instead of hanging), the listening sockets
 * are paused for a moment, and the reserve is reopened.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "srv.h"

#define PEEK_MAX 8192
#define HEAD_DEADLINE_MS 5000
#define PARK_MS 10
#define MAX_PENDING 1024
#define EMFILE_PAUSE_MS 100

struct pending {
    int fd;
    struct sockaddr_storage sa;
    socklen_t salen;
    int64_t deadline_ms;
    int64_t parked_until_ms;
    ssize_t last_len;
};

struct srv_listener {
    int fds[SRV_MAX_LISTEN];
    int n_fds;
    int port;
    int wake[2]; /* pipe: stop */
    int reserve_fd;
    pthread_t thread;
    int started;
    atomic_int stop;
    struct srv_listen_handlers h;
    struct pending pend[MAX_PENDING];
    int n_pend;
    int64_t paused_until_ms;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
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

struct srv_listener *srv_listen_new(char *const *addrs, int n_addrs, int port, struct err *e)
{
    struct srv_listener *l = xcalloc(1, sizeof(*l));
    l->wake[0] = l->wake[1] = -1;
    l->reserve_fd = -1;
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
    if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        err_set(e, ERR_IO, "cannot create pipe: %s", strerror(errno));
        goto fail;
    }
    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return l;
fail:
    srv_listen_free(l);
    return NULL;
}

int srv_listen_port(const struct srv_listener *l)
{
    return l->port;
}

/* Case-insensitive search within n bytes. */
static const char *find_ci(const char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (strncasecmp(hay + i, needle, m) == 0)
            return hay + i;
    return NULL;
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
    const char *u = find_ci(h, n, "\nupgrade:");
    if (!u)
        return 0;
    const char *eol = memchr(u + 1, '\n', n - (size_t)(u + 1 - h));
    size_t span = eol ? (size_t)(eol - u) : n - (size_t)(u - h);
    return find_ci(u, span, "websocket") != NULL;
}

static void dispatch(struct srv_listener *l, struct pending *p, const char *head, size_t n)
{
    if (head && head_is_ws(head, n))
        l->h.ws(l->h.user, p->fd);
    else
        l->h.http(l->h.user, p->fd, (struct sockaddr *)&p->sa, p->salen);
}

static void pend_remove(struct srv_listener *l, int i)
{
    l->pend[i] = l->pend[--l->n_pend];
}

/* Peek at one pending socket; returns 1 when it left the pending set. */
static int pend_check(struct srv_listener *l, int i, int64_t now)
{
    struct pending *p = &l->pend[i];
    char head[PEEK_MAX];
    ssize_t n = recv(p->fd, head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close(p->fd); /* the client vanished before sending a request */
        pend_remove(l, i);
        return 1;
    }
    if (n > 0 && (n == (ssize_t)sizeof(head) || memmem(head, (size_t)n, "\r\n\r\n", 4) ||
                  memmem(head, (size_t)n, "\n\n", 2))) {
        dispatch(l, p, head, (size_t)n);
        pend_remove(l, i);
        return 1;
    }
    if (now >= p->deadline_ms) {
        dispatch(l, p, n > 0 ? head : NULL, n > 0 ? (size_t)n : 0);
        pend_remove(l, i);
        return 1;
    }
    if (n > 0 && n == p->last_len)
        p->parked_until_ms = now + PARK_MS;
    if (n > 0)
        p->last_len = n;
    return 0;
}

static void accept_some(struct srv_listener *l, int lfd, int64_t now)
{
    for (int k = 0; k < 64 && l->n_pend < MAX_PENDING; k++) {
        struct pending *p = &l->pend[l->n_pend];
        p->salen = sizeof(p->sa);
        int fd = accept4(lfd, (struct sockaddr *)&p->sa, &p->salen, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                errno == ECONNABORTED)
                return;
            if (errno == EMFILE || errno == ENFILE) {
                log_warn("listener: out of file descriptors; dropping a connection");
                if (l->reserve_fd >= 0) {
                    close(l->reserve_fd);
                    int tmp = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                    if (tmp >= 0)
                        close(tmp);
                    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
                l->paused_until_ms = now + EMFILE_PAUSE_MS;
                return;
            }
            log_warn("listener: accept failed: %s", strerror(errno));
            l->paused_until_ms = now + EMFILE_PAUSE_MS;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        p->fd = fd;
        p->deadline_ms = now + HEAD_DEADLINE_MS;
        p->parked_until_ms = 0;
        p->last_len = 0;
        l->n_pend++;
        /* Most clients send the head with the connect; try at once. */
        pend_check(l, l->n_pend - 1, now);
    }
}

static void *listen_main(void *arg)
{
    struct srv_listener *l = arg;
    struct pollfd *pfd = xmalloc((SRV_MAX_LISTEN + 1 + MAX_PENDING) * sizeof(*pfd));
    int *pidx = xmalloc(MAX_PENDING * sizeof(*pidx));
    while (!atomic_load(&l->stop)) {
        int64_t now = mono_ms();
        int np = 0, timeout = -1;
        pfd[np++] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
        int listening = now >= l->paused_until_ms && l->n_pend < MAX_PENDING;
        if (listening) {
            for (int i = 0; i < l->n_fds; i++)
                pfd[np++] = (struct pollfd){.fd = l->fds[i], .events = POLLIN};
        } else {
            timeout = (int)(l->paused_until_ms > now ? l->paused_until_ms - now : PARK_MS);
        }
        int first_pend = np, n_polled = 0;
        for (int i = 0; i < l->n_pend; i++) {
            struct pending *p = &l->pend[i];
            int64_t wait = p->deadline_ms - now;
            if (p->parked_until_ms > now) {
                if (p->parked_until_ms - now < wait)
                    wait = p->parked_until_ms - now;
            } else {
                pfd[np++] = (struct pollfd){.fd = p->fd, .events = POLLIN};
                pidx[n_polled++] = i;
            }
            if (wait < 0)
                wait = 0;
            if (timeout < 0 || wait < timeout)
                timeout = (int)wait;
        }
        int r = poll(pfd, (nfds_t)np, timeout);
        if (r < 0 && errno != EINTR) {
            log_error("listener: poll failed: %s", strerror(errno));
            break;
        }
        now = mono_ms();
        if (pfd[0].revents)
            break;
        if (listening)
            for (int i = 0; i < l->n_fds; i++)
                if (pfd[1 + i].revents & POLLIN)
                    accept_some(l, l->fds[i], now);
        /* Check pending sockets from the end so removals do not shift unchecked ones;
         * a polled socket is checked when readable, any socket when its timer is due. */
        int polled_ready[MAX_PENDING];
        memset(polled_ready, 0, sizeof(int) * (size_t)l->n_pend);
        for (int k = 0; k < n_polled; k++)
            if (pidx[k] < l->n_pend && pfd[first_pend + k].revents)
                polled_ready[pidx[k]] = 1;
        for (int i = l->n_pend - 1; i >= 0; i--) {
            struct pending *p = &l->pend[i];
            int due = now >= p->deadline_ms ||
                      (p->parked_until_ms && p->parked_until_ms <= now);
            if (i < MAX_PENDING && (polled_ready[i] || due)) {
                if (p->parked_until_ms <= now)
                    p->parked_until_ms = 0;
                pend_check(l, i, now);
            }
        }
    }
    xfree(pfd);
    xfree(pidx);
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
    for (int i = 0; i < l->n_pend; i++)
        close(l->pend[i].fd);
    for (int i = 0; i < l->n_fds; i++)
        close(l->fds[i]);
    if (l->wake[0] >= 0)
        close(l->wake[0]);
    if (l->wake[1] >= 0)
        close(l->wake[1]);
    if (l->reserve_fd >= 0)
        close(l->reserve_fd);
    xfree(l);
}
