/*
 * srv_config — latentd's command line: every ComfyUI 0.3.64 flag (comfy-api.md §10) plus
 * latentd's own (--port-file, --vram-budget, --device).
 *
 * Flags that make no sense for a C server are accepted with a one-line notice so that
 * existing launch scripts keep working. Directories are made absolute at parse time.
 * ComfyUI's dtype flags (--bf16-unet, --bf16-vae, --bf16-text-enc, --force-fp32, --fp32-*)
 * set mm.precision per model kind (srv_precision.h has ComfyUI's precedence).
 * Invariant after a successful srv_config_parse: every *_dir field is an absolute path
 * (owned by the config), listen_addrs has at least one entry.
 * Threads: parsed once on the main thread; read-only afterwards (any thread).
 */
#ifndef LATENTD_SERVER_SRV_CONFIG_H
#define LATENTD_SERVER_SRV_CONFIG_H

#include <stddef.h>

#include "err.h"
#include "graph.h"
#include "log.h"
#include "memmgr.h"
#include "srv_precision.h"

#define SRV_MAX_LISTEN 8

struct srv_config {
    char *listen_addrs[SRV_MAX_LISTEN]; /* owned; "127.0.0.1" by default */
    int n_listen;
    int port;                   /* 8188; 0 = ephemeral */
    char *port_file;            /* owned or NULL; latentd writes the bound port here */
    char *tls_keyfile, *tls_certfile; /* owned or NULL (accepted, not served: notice) */
    char *cors_origin;          /* owned or NULL: --enable-cors-header [ORIGIN] */
    size_t max_upload_bytes;    /* --max-upload-size MB -> bytes */
    int head_timeout_ms;        /* --head-timeout SEC; 0 = default (10 s) */
    int body_timeout_ms;        /* --body-timeout SEC; 0 = default (60 s) */
    int max_connections;        /* --max-connections N (HTTP); 0 = from the descriptor limit */
    int max_connections_per_ip; /* --max-connections-per-ip N (HTTP); 0 = default (256) */
    int compress;               /* --enable-compress-response-body: gzip JSON/text */
    int multi_user;
    int dont_print_server;
    enum log_level log_level;
    int log_stdout;
    int quick_test_for_ci;

    char *base_dir;     /* owned, absolute */
    char *models_dir;   /* owned: <base>/models */
    char *output_dir;   /* owned */
    char *input_dir;    /* owned */
    char *temp_dir;     /* owned: <--temp-directory>/temp or <base>/temp */
    char *user_dir;     /* owned */
    char *web_dir;      /* owned: --front-end-root or the built-in web/ folder */
    char *database_path;/* owned: from --database-url: a SQLite path (sqlite:///PATH or PATH,
                           default <user>/latentd.db) or a postgresql:// URL as given */
    int user_dir_given; /* --user-directory must already exist */
    int no_worker;      /* --no-worker: a PostgreSQL store's front only, runs no prompt */
    int lease_s;        /* --lease-seconds; 0 = the store's default */
    int affinity_s;     /* --affinity-wait; -1 = the store's default */

    /* The memory manager's flags, filled as argv is read and handed to graph_new as
     * they are: --cpu/--device/--cuda-device, the VRAM state group, --vram-budget,
     * --reserve-vram, --disable-smart-memory, --[disable-]async-offload,
     * --disable-pinned-memory. mm.device_spec borrows device_spec. */
    struct mm_config mm;
    char *device_spec;  /* owned: "auto", "cpu", "sim:SIZE", "cuda:N" */
    enum graph_cache_mode cache_mode;
    int cache_lru_size;
    enum graph_preview_method preview_method;
    int preview_size;
    int disable_metadata;
    char *hash_function; /* owned: "sha256" default */

    char **argv;        /* borrowed: the process argv, for /system_stats */
    int argc;

    struct srv_precision _precision; /* the dtype flags seen; resolved into mm.precision */
};

enum srv_config_result {
    SRV_CONFIG_RUN = 0,  /* start the server */
    SRV_CONFIG_EXIT = 1, /* --help printed: exit 0 */
};

/*
 * Parse argv into *cfg (which this initialises). `builtin_web_dir` is the default web
 * root. Returns SRV_CONFIG_RUN or SRV_CONFIG_EXIT, or <0 with a message in *e (unknown
 * flag, bad value). Notices for ignored flags go to the log at INFO.
 */
int srv_config_parse(struct srv_config *cfg, int argc, char **argv, const char *builtin_web_dir,
                     struct err *e);
void srv_config_release(struct srv_config *cfg);

/* Fill a graph_config whose strings (and memory config) borrow from cfg. */
void srv_config_to_graph(const struct srv_config *cfg, struct graph_config *gc);

/* Print --help to stdout. */
void srv_config_print_help(void);

#endif
