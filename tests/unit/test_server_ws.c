/* Unit test for the WebSocket hub (server/srv_ws.c) over real sockets: first status with
 * sid, feature-flag negotiation, routing to one sid vs all, the binary preview framing of
 * comfy-api.md §4.6 (type 1 for legacy clients, type 4 with JSON for negotiated ones) and
 * the bare executing{node} on reconnect. The client side speaks raw RFC 6455 here so the
 * bytes on the wire are what is checked. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "harness.h"
#include "srv.h"

static int lfd;
static struct srv_ws *ws;

static int read_full(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 5000) <= 0)
            return -1;
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Connect, hand the accepted side to the hub, do the upgrade. Returns the client fd. */
static int connect_ws(const char *query)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&sa, sl) < 0)
        return -1;
    int s = accept(lfd, NULL, NULL);
    srv_ws_adopt(ws, s);
    char req[512];
    snprintf(req, sizeof(req),
             "GET /ws%s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
             query);
    if (write(c, req, strlen(req)) != (ssize_t)strlen(req))
        return -1;
    char head[1024];
    size_t n = 0;
    while (n < sizeof(head) - 1) { /* byte by byte up to the blank line: no frame bytes eaten */
        if (read_full(c, head + n, 1) < 0)
            return -1;
        n++;
        if (n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    head[n] = 0;
    return strncmp(head, "HTTP/1.1 101", 12) == 0 ? c : -1;
}

/* One unmasked server frame; *opcode set; payload xmalloc'ed (NUL-terminated). */
static unsigned char *read_frame(int c, int *opcode, size_t *len)
{
    unsigned char h[2];
    if (read_full(c, h, 2) < 0)
        return NULL;
    *opcode = h[0] & 0x0f;
    uint64_t n = h[1] & 0x7f;
    if (n == 126) {
        unsigned char e[2];
        read_full(c, e, 2);
        n = (uint64_t)e[0] << 8 | e[1];
    } else if (n == 127) {
        unsigned char e[8];
        read_full(c, e, 8);
        n = 0;
        for (int i = 0; i < 8; i++)
            n = n << 8 | e[i];
    }
    unsigned char *p = xmalloc(n + 1);
    if (read_full(c, p, n) < 0) {
        xfree(p);
        return NULL;
    }
    p[n] = 0;
    *len = n;
    return p;
}

static cJSON *read_json(int c)
{
    int op;
    size_t n;
    unsigned char *p = read_frame(c, &op, &n);
    cJSON *j = p && op == 1 ? cJSON_Parse((char *)p) : NULL;
    xfree(p);
    return j;
}

static void send_text(int c, const char *text)
{
    size_t n = strlen(text);
    unsigned char f[512];
    unsigned char mask[4] = {1, 2, 3, 4};
    f[0] = 0x81;
    f[1] = (unsigned char)(0x80 | n); /* n < 126 here */
    memcpy(f + 2, mask, 4);
    for (size_t i = 0; i < n; i++)
        f[6 + i] = (unsigned char)(text[i] ^ mask[i % 4]);
    if (write(c, f, 6 + n) != (ssize_t)(6 + n))
        printf("# short write\n");
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const char *type_of(cJSON *j)
{
    cJSON *t = cJSON_GetObjectItem(j, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

int main(void)
{
    struct srv s;
    struct srv_config cfg;
    memset(&s, 0, sizeof(s));
    memset(&cfg, 0, sizeof(cfg));
    cfg.max_upload_bytes = 1234;
    cfg.cors_origin = "*"; /* no origin guard in this test */
    s.cfg = &cfg;
    srv_queue_init(&s.queue, 0);
    struct err e = {0};
    ws = srv_ws_new(&s, &e);
    ok(ws != NULL, "hub created (%s)", e.msg);
    s.ws = ws;

    lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(lfd, (struct sockaddr *)&sa, sizeof(sa));
    listen(lfd, 8);

    int a = connect_ws("?clientId=a");
    ok(a >= 0, "client a upgraded");
    cJSON *j = read_json(a);
    EXPECT_STR(type_of(j), "status");
    EXPECT_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data"), "sid")->valuestring, "a");
    cJSON_Delete(j);

    int b = connect_ws("");
    ok(b >= 0, "client b upgraded");
    j = read_json(b);
    const char *sid = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "data"), "sid")->valuestring;
    ok(strlen(sid) == 32 && strspn(sid, "0123456789abcdef") == 32, "generated sid '%s'", sid);
    cJSON_Delete(j);
    send_text(b, "{\"type\":\"feature_flags\",\"data\":{\"supports_preview_metadata\":true}}");
    j = read_json(b);
    EXPECT_STR(type_of(j), "feature_flags");
    cJSON *d = cJSON_GetObjectItem(j, "data");
    EXPECT_EQ(cJSON_GetObjectItem(d, "max_upload_size")->valuedouble, 1234);
    ok(cJSON_IsTrue(cJSON_GetObjectItem(d, "supports_preview_metadata")), "flags reply");
    cJSON_Delete(j);

    /* A sampling step to all: progress_state, preview, progress. The metadata client b
     * gets them in that order with a type-4 frame; legacy a gets the type-1 frame after
     * progress (comfy-api.md §4.5). */
    const unsigned char jpeg[] = {0xff, 0xd8, 0xff, 0xe0, 0x42};
    srv_ws_send(ws, NULL, "progress_state", cJSON_CreateObject());
    srv_ws_send_preview(ws, NULL, 1, jpeg, sizeof(jpeg), "3", "P");
    srv_ws_send(ws, NULL, "progress", cJSON_CreateObject());
    int op = -1;
    size_t n = 0;
    j = read_json(a);
    EXPECT_STR(type_of(j), "progress_state");
    cJSON_Delete(j);
    j = read_json(a);
    EXPECT_STR(type_of(j), "progress");
    cJSON_Delete(j);
    unsigned char *f = read_frame(a, &op, &n);
    if (!f)
        SKIP("no preview frame for a (hub broken)");
    EXPECT_EQ(op, 2);
    EXPECT_EQ(n, 8 + sizeof(jpeg));
    EXPECT_EQ(be32(f), 1);
    EXPECT_EQ(be32(f + 4), 1);
    ok(memcmp(f + 8, jpeg, sizeof(jpeg)) == 0, "type 1 payload is the JPEG");
    xfree(f);
    j = read_json(b);
    EXPECT_STR(type_of(j), "progress_state");
    cJSON_Delete(j);
    f = read_frame(b, &op, &n);
    if (!f)
        SKIP("no preview frame for b (hub broken)");
    EXPECT_EQ(op, 2);
    EXPECT_EQ(be32(f), 4);
    uint32_t jl = be32(f + 4);
    cJSON *meta = cJSON_ParseWithLength((char *)f + 8, jl);
    EXPECT_STR(cJSON_GetObjectItem(meta, "node_id")->valuestring, "3");
    EXPECT_STR(cJSON_GetObjectItem(meta, "display_node_id")->valuestring, "3");
    EXPECT_STR(cJSON_GetObjectItem(meta, "real_node_id")->valuestring, "3");
    EXPECT_STR(cJSON_GetObjectItem(meta, "prompt_id")->valuestring, "P");
    ok(cJSON_IsNull(cJSON_GetObjectItem(meta, "parent_node_id")), "parent_node_id null");
    EXPECT_STR(cJSON_GetObjectItem(meta, "image_type")->valuestring, "image/jpeg");
    cJSON_Delete(meta);
    EXPECT_EQ(n, 8 + jl + sizeof(jpeg));
    ok(memcmp(f + 8 + jl, jpeg, sizeof(jpeg)) == 0, "type 4 payload ends with the JPEG");
    xfree(f);
    j = read_json(b);
    EXPECT_STR(type_of(j), "progress");
    cJSON_Delete(j);

    /* Routed to a only; then a broadcast: b's next frame must be the broadcast. */
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "node", "7");
    srv_ws_send(ws, "a", "executing", x);
    srv_broadcast_status(&s);
    j = read_json(a);
    EXPECT_STR(type_of(j), "executing");
    cJSON_Delete(j);
    j = read_json(a);
    EXPECT_STR(type_of(j), "status");
    cJSON_Delete(j);
    j = read_json(b);
    EXPECT_STR(type_of(j), "status");
    cJSON_Delete(j);
    /* A held legacy preview is flushed before any other message but progress_state. */
    srv_ws_send_preview(ws, "a", 2, jpeg, 2, "9", "Q");
    srv_ws_send(ws, "a", "executed", cJSON_CreateObject());
    f = read_frame(a, &op, &n);
    EXPECT_EQ(op, 2);
    EXPECT_EQ(f ? be32(f + 4) : 0, 2);
    xfree(f);
    j = read_json(a);
    EXPECT_STR(type_of(j), "executed");
    cJSON_Delete(j);

    /* Reconnect as "a" while a node of a's prompt runs: status, then bare executing. */
    srv_ws_set_executing(ws, "a", "5");
    int a2 = connect_ws("?clientId=a");
    j = read_json(a2);
    EXPECT_STR(type_of(j), "status");
    cJSON_Delete(j);
    j = read_json(a2);
    char *t = cJSON_PrintUnformatted(j);
    EXPECT_STR(t, "{\"type\":\"executing\",\"data\":{\"node\":\"5\"}}");
    cJSON_free(t);
    cJSON_Delete(j);
    srv_ws_set_executing(ws, NULL, NULL);
    /* The old socket no longer receives a's messages; the new one does. */
    srv_ws_send(ws, "a", "executed", cJSON_CreateObject());
    srv_broadcast_status(&s);
    j = read_json(a);
    EXPECT_STR(type_of(j), "status");
    cJSON_Delete(j);
    j = read_json(a2);
    EXPECT_STR(type_of(j), "executed");
    cJSON_Delete(j);
    j = read_json(a2);
    cJSON_Delete(j);
    EXPECT_EQ(srv_ws_count(ws), 3);

    /* A client that never reads is closed once its queue passes the byte cap. */
    int slow = connect_ws("?clientId=slow");
    ok(slow >= 0, "slow client upgraded");
    usleep(100 * 1000);
    EXPECT_EQ(srv_ws_count(ws), 4);
    size_t big = 1u << 20;
    unsigned char *blob = xcalloc(1, big);
    for (int i = 0; i < 100; i++)
        srv_ws_send_preview(ws, "slow", 1, blob, big, "3", "P");
    srv_ws_send(ws, "slow", "executing", cJSON_CreateObject()); /* flushes the held one */
    xfree(blob);
    int waited = 0;
    while (srv_ws_count(ws) > 3 && waited < 5000) {
        usleep(50 * 1000);
        waited += 50;
    }
    EXPECT_EQ(srv_ws_count(ws), 3);
    close(slow);

    close(a);
    close(b);
    close(a2);
    srv_ws_free(ws);
    srv_queue_release(&s.queue);
    close(lfd);
    EXPECT_EQ(alloc_live_count(), 0);
    return harness_done();
}
