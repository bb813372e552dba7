/*
 * bench_http_mhd — the baseline for bench/http: a minimal libmicrohttpd server that answers
 * GET /system_stats and GET /queue with fixed JSON bodies of the same shape and size as
 * latentd's, using the same MHD threading mode latentd uses (epoll, a pool of 4 threads), but
 * with MHD's own listen socket: no peeking listener, no routing, no real work.
 * Usage: bench_http_mhd PORT_FILE   (binds 127.0.0.1 on an ephemeral port; runs until
 * SIGTERM/SIGINT).
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static const char stats[] =
    "{\"system\":{\"os\":\"posix\",\"ram_total\":25276510208,\"ram_free\":24617054208,"
    "\"comfyui_version\":\"0.3.64\",\"required_frontend_version\":\"1.27.10\","
    "\"installed_templates_version\":null,\"required_templates_version\":\"0.1.95\","
    "\"python_version\":\"latentd 0.1.0 (C11, no Python)\",\"pytorch_version\":\"none\","
    "\"embedded_python\":false,\"argv\":[\"latentd\",\"--port\",\"0\"]},\"devices\":[{\"name\":"
    "\"cpu\",\"type\":\"cpu\",\"index\":null,\"vram_total\":25276510208,\"vram_free\":"
    "24617054208,\"torch_vram_total\":25276510208,\"torch_vram_free\":24617054208}]}";
static const char queue[] = "{\"queue_running\":[],\"queue_pending\":[]}";

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    (void)upload;
    (void)upload_size;
    /* The usual MHD pattern: answer on the second call. A response queued on the first
     * call is an "early response" and MHD closes the connection after it. */
    static int marker;
    if (*con_cls == NULL) {
        *con_cls = &marker;
        return MHD_YES;
    }
    const char *body = NULL;
    if (strcmp(method, "GET") == 0 && strcmp(url, "/system_stats") == 0)
        body = stats;
    else if (strcmp(method, "GET") == 0 && strcmp(url, "/queue") == 0)
        body = queue;
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0,
                                                             (void *)(body ? body : ""),
                                                             MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, body ? 200 : 404, r);
    MHD_destroy_response(r);
    return ret;
}

/* latentd's listener sets TCP_NODELAY on every accepted socket; do the same here so the
 * baseline is not handicapped by Nagle + delayed ACK. */
static void on_conn(void *cls, struct MHD_Connection *c, void **socket_context,
                    enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    (void)socket_context;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int one = 1;
    if (ci)
        setsockopt(ci->connect_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_http_mhd PORT_FILE\n");
        return 2;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC,
        0, NULL,
        NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_THREAD_POOL_SIZE, 4u, MHD_OPTION_NOTIFY_CONNECTION, on_conn, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "bench_http_mhd: cannot start\n");
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    FILE *f = fopen(argv[1], "w");
    if (!f)
        return 1;
    fprintf(f, "%u\n", (unsigned)info->port);
    fclose(f);
    int sig;
    sigwait(&sigs, &sig);
    MHD_stop_daemon(d);
    return 0;
}
