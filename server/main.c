/*
 * latentd: parse flags, prepare folders, open the job store, create the graph context,
 * rebuild the queue, start the WebSocket hub, the HTTP daemon, the executor and the
 * listener, then wait for SIGINT/SIGTERM and stop in reverse order.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "srv.h"
#include "srv_fs.h"
#include "srv_req.h"

#ifndef LATENTD_WEB_DIR
#define LATENTD_WEB_DIR "web"
#endif

static void on_pending(void *user, struct srv_store_job *sj)
{
    struct srv *s = user;
    struct srv_job *j = xcalloc(1, sizeof(*j));
    j->row_id = sj->id;
    j->prompt_id = sj->prompt_id;
    j->number = sj->number;
    j->number_text = sj->number_text;
    sj->prompt_id = sj->number_text = NULL;
    j->prompt = graph_json_parse(sj->prompt, strlen(sj->prompt));
    j->extra_data = cJSON_Parse(sj->extra_data);
    j->outputs = cJSON_Parse(sj->outputs_to_execute);
    j->client_id = sj->client_id;
    sj->client_id = NULL;
    /* Validated when it was queued: parsed into native form, not validated again. */
    j->native = j->prompt ? graph_prompt_parse(s->graph, j->prompt) : NULL;
    if (!j->native || !j->extra_data || !j->outputs) {
        log_error("job store: pending prompt '%s' is unreadable; dropped", j->prompt_id);
        srv_store_delete_pending(s->store, j->row_id);
        srv_job_free(j);
        return;
    }
    srv_queue_push(&s->queue, j, NULL, NULL);
}

static void on_http(void *user, int fd, const struct sockaddr *sa, socklen_t len)
{
    struct srv *s = user;
    srv_http_add(s->http, fd, sa, len);
}

static void on_ws(void *user, int fd)
{
    struct srv *s = user;
    srv_ws_adopt(s->ws, fd);
}

static int write_port_file(const char *path, int port)
{
    /* Write then rename, so a test polling the file never reads half a number. */
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static int prepare_dirs(const struct srv_config *cfg, struct err *e)
{
    const char *dirs[] = {cfg->base_dir, cfg->models_dir, cfg->input_dir, cfg->output_dir,
                          cfg->user_dir};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if (srv_fs_mkdirs(dirs[i], 0755) < 0)
            return err_set(e, ERR_IO, "cannot create '%s': %s", dirs[i], strerror(errno));
    for (int i = 0; srv_model_folders[i]; i++) {
        if (strcmp(srv_model_folders[i], "custom_nodes") == 0)
            continue;
        char **v = srv_model_folder_dirs(cfg, srv_model_folders[i]);
        srv_fs_mkdirs(v[0], 0755);
        srv_strv_free(v);
    }
    /* temp/ is wiped at start (ComfyUI does the same). */
    srv_fs_remove_tree(cfg->temp_dir);
    if (srv_fs_mkdirs(cfg->temp_dir, 0755) < 0)
        return err_set(e, ERR_IO, "cannot create '%s': %s", cfg->temp_dir, strerror(errno));
    if (srv_store_url_is_pg(cfg->database_path))
        return 0; /* a PostgreSQL store has no folder here */
    char *db_dir = xstrdup(cfg->database_path);
    char *slash = strrchr(db_dir, '/');
    if (slash && slash != db_dir) {
        *slash = '\0';
        srv_fs_mkdirs(db_dir, 0755);
    }
    xfree(db_dir);
    return 0;
}

static void banner(const struct srv *s, int port)
{
    const struct srv_config *cfg = s->cfg;
    const char *host = cfg->listen_addrs[0];
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
        host = "127.0.0.1";
    int v6 = strchr(host, ':') != NULL;
    log_info("latentd 0.1.0: to see the GUI go to: http://%s%s%s:%d", v6 ? "[" : "", host,
             v6 ? "]" : "", port);
    if (cfg->dont_print_server)
        return;
    cJSON *dev = graph_device_stats(s->graph);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(dev, "name");
    log_info("device: %s", cJSON_IsString(name) ? name->valuestring : "?");
    cJSON_Delete(dev);
    for (int i = 0; i < cfg->n_listen; i++)
        log_info("listening on %s port %d", cfg->listen_addrs[i], port);
    log_info("models: %s", cfg->models_dir);
    log_info("input: %s", cfg->input_dir);
    log_info("output: %s", cfg->output_dir);
    log_info("temp: %s", cfg->temp_dir);
    log_info("user: %s", cfg->user_dir);
    log_info("web: %s", cfg->web_dir);
    if (srv_store_shared(s->store)) /* the URL may carry a password: not logged */
        log_info("job store: postgresql, shared (%d queued, %s)", srv_jobs_remaining((struct srv *)s),
                 cfg->no_worker ? "API only: --no-worker" : "this process is a worker");
    else
        log_info("job store: %s (%d pending)", cfg->database_path,
                 srv_queue_remaining((struct srv_queue *)&s->queue));
}

int main(int argc, char **argv)
{
    struct srv_config cfg;
    struct err e = {0};
    int rc = srv_config_parse(&cfg, argc, argv, LATENTD_WEB_DIR, &e);
    if (rc == SRV_CONFIG_EXIT) {
        srv_config_print_help();
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "latentd: %s\n", e.msg);
        return 2;
    }
    if (cfg.log_stdout)
        dup2(STDOUT_FILENO, STDERR_FILENO); /* log.h writes to stderr */
    log_set_level(cfg.log_level);

    /* Threads inherit this mask; the main thread takes the signals with sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a vanished client must not kill the server */

    struct srv s;
    memset(&s, 0, sizeof(s));
    s.cfg = &cfg;
    s.start_ms = clock_wall_ms();
    int exit_code = 1;
    struct graph_config gc;

    if (prepare_dirs(&cfg, &e) < 0)
        goto fail;
    if (cfg.no_worker && !srv_store_url_is_pg(cfg.database_path)) {
        err_set(&e, ERR_INVALID, "--no-worker needs a shared store (--database-url postgresql://...)");
        goto fail;
    }
    struct srv_store_options so = {.worker = !cfg.no_worker, .lease_s = cfg.lease_s,
                                   .affinity_s = cfg.affinity_s};
    s.store = srv_store_open_opts(cfg.database_path, &so, &e);
    if (!s.store)
        goto fail;
    srv_config_to_graph(&cfg, &gc);
    s.graph = graph_new(&gc, &e);
    if (!s.graph)
        goto fail;
    srv_queue_init(&s.queue, srv_store_next_counter(s.store));
    srv_store_load_pending(s.store, on_pending, &s);
    if (!(s.ws = srv_ws_new(&s, &e)))
        goto fail_queue;
    if (srv_jobs_start(&s, &e) < 0) /* after the hub: the watch thread hands it events */
        goto fail_queue;
    if (!(s.http = srv_http_new(&s, &e)))
        goto fail_queue;
    if (!(s.listener = srv_listen_new(cfg.listen_addrs, cfg.n_listen, cfg.port, &e)))
        goto fail_queue;
    srv_listen_configure(s.listener, &cfg);
    int port = srv_listen_port(s.listener);
    if (srv_exec_start(&s, &e) < 0)
        goto fail_queue;
    struct srv_listen_handlers h = {&s, on_http, on_ws};
    if (srv_listen_start(s.listener, &h, &e) < 0)
        goto fail_exec;
    if (cfg.port_file && write_port_file(cfg.port_file, port) < 0) {
        err_set(&e, ERR_IO, "cannot write port file '%s': %s", cfg.port_file, strerror(errno));
        goto fail_exec;
    }
    banner(&s, port);
    if (cfg.quick_test_for_ci) {
        log_info("--quick-test-for-ci: exiting");
    } else {
        int sig = 0;
        sigwait(&sigs, &sig);
        log_info("%s received: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    exit_code = 0;
fail_exec:
    /* Stop intake first, then the executor (it still sends to WS), then the hub. */
    srv_listen_free(s.listener);
    s.listener = NULL;
    srv_exec_stop(&s);
fail_queue:
    srv_listen_free(s.listener);
    srv_http_free(s.http);
    srv_jobs_stop(&s);
    srv_ws_free(s.ws);
    srv_queue_release(&s.queue);
fail:
    if (exit_code != 0 && e.msg[0])
        log_error("%s", e.msg);
    graph_free(s.graph);
    srv_store_close(s.store);
    srv_fs_remove_tree(cfg.temp_dir);
    srv_config_release(&cfg);
    return exit_code;
}
