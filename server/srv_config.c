#include "srv_config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "bytesize.h"
#include "srv_path.h"
#include "srv_precision.h"

/* How a flag takes its value. */
enum flag_arg {
    FLAG_NONE,     /* bare switch */
    FLAG_ONE,      /* exactly one value */
    FLAG_OPTIONAL, /* zero or one value (the next word unless it starts with "--") */
    FLAG_MANY,     /* zero or more values up to the next "--" word */
};

enum flag_id {
    F_LISTEN, F_PORT, F_PORT_FILE, F_TLS_KEY, F_TLS_CERT, F_CORS, F_MAX_UPLOAD, F_HEAD_TIMEOUT,
    F_BODY_TIMEOUT, F_MAX_CONNS, F_MAX_CONNS_IP, F_COMPRESS,
    F_MULTI_USER, F_DONT_PRINT, F_VERBOSE, F_LOG_STDOUT, F_BASE_DIR, F_OUTPUT_DIR, F_INPUT_DIR,
    F_TEMP_DIR, F_USER_DIR, F_FRONT_END_ROOT, F_DATABASE_URL, F_CPU, F_GPU_ONLY, F_HIGHVRAM,
    F_NORMALVRAM, F_LOWVRAM, F_NOVRAM, F_RESERVE_VRAM, F_DISABLE_SMART_MEMORY, F_CUDA_DEVICE,
    F_DEVICE, F_VRAM_BUDGET, F_ASYNC_OFFLOAD, F_DISABLE_ASYNC_OFFLOAD, F_DISABLE_PINNED,
    F_CACHE_CLASSIC, F_CACHE_LRU, F_CACHE_NONE, F_PREVIEW_METHOD, F_PREVIEW_SIZE,
    F_DISABLE_METADATA, F_HASH, F_QUICK_TEST, F_HELP, F_IGNORED, F_WORKER, F_NO_WORKER, F_LEASE,
    F_AFFINITY, F_PRECISION,
};

struct flag {
    const char *name;
    enum flag_arg arg;
    enum flag_id id;
    const char *help; /* NULL: listed among the accepted-and-ignored flags */
};

static const struct flag flags[] = {
    {"--listen", FLAG_OPTIONAL, F_LISTEN, "[IP[,IP...]]  bind address(es); default 127.0.0.1, bare flag = 0.0.0.0,::"},
    {"--port", FLAG_ONE, F_PORT, "N  TCP port (default 8188; 0 picks a free port)"},
    {"--port-file", FLAG_ONE, F_PORT_FILE, "PATH  write the bound port (decimal + newline) to PATH once listening"},
    {"--tls-keyfile", FLAG_ONE, F_TLS_KEY, "PATH  TLS key (accepted; latentd serves plain HTTP only)"},
    {"--tls-certfile", FLAG_ONE, F_TLS_CERT, "PATH  TLS certificate (accepted; plain HTTP only)"},
    {"--enable-cors-header", FLAG_OPTIONAL, F_CORS, "[ORIGIN]  send CORS headers (default *); disables the origin guard"},
    {"--max-upload-size", FLAG_ONE, F_MAX_UPLOAD, "MB  max request body (default 100)"},
    {"--head-timeout", FLAG_ONE, F_HEAD_TIMEOUT, "SEC  latentd: a request head must be complete within SEC of the connect or of the previous response (default 10)"},
    {"--body-timeout", FLAG_ONE, F_BODY_TIMEOUT, "SEC  latentd: a request body must be complete within SEC of its head (default 60)"},
    {"--max-connections", FLAG_ONE, F_MAX_CONNS, "N  latentd: open HTTP connections at most (default: half the descriptor limit, <= 16384)"},
    {"--max-connections-per-ip", FLAG_ONE, F_MAX_CONNS_IP, "N  latentd: open HTTP connections per client address (IPv6: per /64) at most (default 256)"},
    {"--enable-compress-response-body", FLAG_NONE, F_COMPRESS, "gzip JSON/text responses for clients that accept it"},
    {"--multi-user", FLAG_NONE, F_MULTI_USER, "per-user settings/userdata (comfy-user header)"},
    {"--dont-print-server", FLAG_NONE, F_DONT_PRINT, "quieter startup output"},
    {"--verbose", FLAG_OPTIONAL, F_VERBOSE, "[LEVEL]  DEBUG|INFO|WARNING|ERROR|CRITICAL (bare = DEBUG); DEBUG logs each request"},
    {"--log-stdout", FLAG_NONE, F_LOG_STDOUT, "log to stdout instead of stderr"},
    {"--base-directory", FLAG_ONE, F_BASE_DIR, "DIR  root of models/ input/ output/ temp/ user/ (default: the binary's directory)"},
    {"--output-directory", FLAG_ONE, F_OUTPUT_DIR, "DIR  output root"},
    {"--input-directory", FLAG_ONE, F_INPUT_DIR, "DIR  input root (uploads, LoadImage)"},
    {"--temp-directory", FLAG_ONE, F_TEMP_DIR, "DIR  temp root is DIR/temp; wiped at start"},
    {"--user-directory", FLAG_ONE, F_USER_DIR, "DIR  user data root (must exist)"},
    {"--front-end-root", FLAG_ONE, F_FRONT_END_ROOT, "DIR  serve DIR as the web UI"},
    {"--database-url", FLAG_ONE, F_DATABASE_URL, "URL  job store: sqlite:///PATH or PATH (default <user>/latentd.db), or postgresql://... shared by several latentd processes"},
    {"--worker", FLAG_NONE, F_WORKER, "latentd: run prompts from the queue (default)"},
    {"--no-worker", FLAG_NONE, F_NO_WORKER, "latentd: PostgreSQL store only: serve the API, run nothing"},
    {"--affinity-wait", FLAG_ONE, F_AFFINITY, "SEC  latentd: PostgreSQL store: how long a queued prompt may wait for a live worker that already holds its models (default 10, 0 = plain FIFO)"},
    {"--lease-seconds", FLAG_ONE, F_LEASE, "SEC  latentd: PostgreSQL store: a running job's lease, renewed every SEC/3 (default 30, 3..60)"},
    {"--cpu", FLAG_NONE, F_CPU, "run everything on the CPU"},
    {"--gpu-only", FLAG_NONE, F_GPU_ONLY, "keep every model on the GPU"},
    {"--highvram", FLAG_NONE, F_HIGHVRAM, "keep models in VRAM after use"},
    {"--normalvram", FLAG_NONE, F_NORMALVRAM, "force normal VRAM mode"},
    {"--lowvram", FLAG_NONE, F_LOWVRAM, "stream UNet parts to save VRAM"},
    {"--novram", FLAG_NONE, F_NOVRAM, "weights mostly in RAM"},
    {"--reserve-vram", FLAG_ONE, F_RESERVE_VRAM, "GB  VRAM to leave free"},
    {"--disable-smart-memory", FLAG_NONE, F_DISABLE_SMART_MEMORY, "unload models after every prompt"},
    {"--cuda-device", FLAG_ONE, F_CUDA_DEVICE, "N  use GPU N"},
    {"--device", FLAG_ONE, F_DEVICE, "SPEC  latentd: auto|cpu|sim:SIZE|cuda:N"},
    {"--vram-budget", FLAG_ONE, F_VRAM_BUDGET, "BYTES  latentd: hard VRAM cap (suffix K/M/G allowed)"},
    {"--async-offload", FLAG_NONE, F_ASYNC_OFFLOAD, "overlap weight uploads with compute (default on)"},
    {"--disable-async-offload", FLAG_NONE, F_DISABLE_ASYNC_OFFLOAD, "no copy streams"},
    {"--disable-pinned-memory", FLAG_NONE, F_DISABLE_PINNED, "no pinned host memory"},
    {"--cache-classic", FLAG_NONE, F_CACHE_CLASSIC, "keep the last run's outputs (default)"},
    {"--cache-lru", FLAG_ONE, F_CACHE_LRU, "N  LRU cache of N node results"},
    {"--cache-none", FLAG_NONE, F_CACHE_NONE, "no cross-run caching"},
    {"--preview-method", FLAG_ONE, F_PREVIEW_METHOD, "none|auto|latent2rgb|taesd (default none)"},
    {"--preview-size", FLAG_ONE, F_PREVIEW_SIZE, "N  max preview edge in px (default 512)"},
    {"--disable-metadata", FLAG_NONE, F_DISABLE_METADATA, "no prompt/workflow chunks in PNGs"},
    {"--default-hashing-function", FLAG_ONE, F_HASH, "md5|sha1|sha256|sha512  upload de-duplication"},
    {"--quick-test-for-ci", FLAG_NONE, F_QUICK_TEST, "start up, then exit"},
    {"--help", FLAG_NONE, F_HELP, "this text"},
    {"-h", FLAG_NONE, F_HELP, NULL},
    /* ComfyUI's dtype groups (srv_precision.h); the ones without help are fp16/fp64/fp8:
     * accepted with a notice, the model computes in fp32. */
    {"--force-fp32", FLAG_NONE, F_PRECISION, "force fp32 compute (latentd's CPU default; a model's own --bf16-* flag still wins, as in ComfyUI)"},
    {"--force-fp16", FLAG_NONE, F_PRECISION, NULL},
    {"--fp32-unet", FLAG_NONE, F_PRECISION, "run the diffusion model in fp32 (default)"},
    {"--fp64-unet", FLAG_NONE, F_PRECISION, NULL},
    {"--bf16-unet", FLAG_NONE, F_PRECISION, "run the diffusion model's GEMMs (conv, linear) in bf16: bf16 inputs, fp32 accumulation (AVX-512 BF16/AMX where the CPU has them)"},
    {"--fp16-unet", FLAG_NONE, F_PRECISION, NULL},
    {"--fp8_e4m3fn-unet", FLAG_NONE, F_PRECISION, NULL},
    {"--fp8_e5m2-unet", FLAG_NONE, F_PRECISION, NULL},
    {"--fp8_e8m0fnu-unet", FLAG_NONE, F_PRECISION, NULL},
    {"--fp16-vae", FLAG_NONE, F_PRECISION, NULL},
    {"--fp32-vae", FLAG_NONE, F_PRECISION, "run the VAE in fp32 (default)"},
    {"--bf16-vae", FLAG_NONE, F_PRECISION, "run the VAE's GEMMs in bf16 (as --bf16-unet)"},
    {"--fp8_e4m3fn-text-enc", FLAG_NONE, F_PRECISION, NULL},
    {"--fp8_e5m2-text-enc", FLAG_NONE, F_PRECISION, NULL},
    {"--fp16-text-enc", FLAG_NONE, F_PRECISION, NULL},
    {"--fp32-text-enc", FLAG_NONE, F_PRECISION, "run the text encoders in fp32 (default)"},
    {"--bf16-text-enc", FLAG_NONE, F_PRECISION, "run the text encoders' GEMMs in bf16 (as --bf16-unet)"},
    /* Accepted and ignored, each with a one-line notice. */
    {"--auto-launch", FLAG_NONE, F_IGNORED, NULL},
    {"--disable-auto-launch", FLAG_NONE, F_IGNORED, NULL},
    {"--extra-model-paths-config", FLAG_MANY, F_IGNORED, NULL},
    {"--front-end-version", FLAG_ONE, F_IGNORED, NULL},
    {"--default-device", FLAG_ONE, F_IGNORED, NULL},
    {"--cuda-malloc", FLAG_NONE, F_IGNORED, NULL},
    {"--disable-cuda-malloc", FLAG_NONE, F_IGNORED, NULL},
    {"--force-non-blocking", FLAG_NONE, F_IGNORED, NULL},
    {"--deterministic", FLAG_NONE, F_IGNORED, NULL},
    {"--fast", FLAG_MANY, F_IGNORED, NULL},
    {"--cpu-vae", FLAG_NONE, F_IGNORED, NULL},
    {"--force-channels-last", FLAG_NONE, F_IGNORED, NULL},
    {"--use-split-cross-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--use-quad-cross-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--use-pytorch-cross-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--use-sage-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--use-flash-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--disable-xformers", FLAG_NONE, F_IGNORED, NULL},
    {"--force-upcast-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--dont-upcast-attention", FLAG_NONE, F_IGNORED, NULL},
    {"--disable-all-custom-nodes", FLAG_NONE, F_IGNORED, NULL},
    {"--whitelist-custom-nodes", FLAG_MANY, F_IGNORED, NULL},
    {"--disable-api-nodes", FLAG_NONE, F_IGNORED, NULL},
    {"--directml", FLAG_OPTIONAL, F_IGNORED, NULL},
    {"--oneapi-device-selector", FLAG_ONE, F_IGNORED, NULL},
    {"--disable-ipex-optimize", FLAG_NONE, F_IGNORED, NULL},
    {"--supports-fp8-compute", FLAG_NONE, F_IGNORED, NULL},
    {"--mmap-torch-files", FLAG_NONE, F_IGNORED, NULL},
    {"--disable-mmap", FLAG_NONE, F_IGNORED, NULL},
    {"--windows-standalone-build", FLAG_NONE, F_IGNORED, NULL},
    {"--comfy-api-base", FLAG_ONE, F_IGNORED, NULL},
};

void srv_config_print_help(void)
{
    printf("usage: latentd [flags]\n\nlatentd: a ComfyUI-compatible node-graph server for SD 1.5.\n\n");
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (flags[i].help)
            printf("  %-34s %s\n", flags[i].name, flags[i].help);
    printf("\naccepted for ComfyUI compatibility and ignored (a notice is logged):\n");
    int col = 0;
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        if (flags[i].help || flags[i].id == F_HELP)
            continue;
        int w = (int)strlen(flags[i].name) + 1;
        if (col + w > 96) {
            printf("\n");
            col = 0;
        }
        printf("%s%s", col ? " " : "  ", flags[i].name);
        col += w + (col ? 0 : 1);
    }
    printf("\n");
}

static const struct flag *flag_find(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strlen(flags[i].name) == n && memcmp(flags[i].name, name, n) == 0)
            return &flags[i];
    return NULL;
}

/* An absolute, normalised-enough path: relative paths are joined to the cwd. */
static char *abs_path(const char *p)
{
    char cwd[PATH_MAX];
    if (p[0] == '/' || !getcwd(cwd, sizeof(cwd)))
        return srv_path_normalize(p);
    struct buf b;
    buf_init(&b);
    buf_printf(&b, "%s/%s", cwd, p);
    char *n = srv_path_normalize(b.ptr);
    buf_release(&b);
    return n;
}

static char *join(const char *a, const char *b)
{
    struct buf s;
    buf_init(&s);
    buf_printf(&s, "%s/%s", a, b);
    return buf_detach(&s, NULL);
}

static void set_str(char **dst, const char *v)
{
    xfree(*dst);
    *dst = v ? xstrdup(v) : NULL;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || v != v)
        return -1;
    *out = v;
    return 0;
}

static void listen_set(struct srv_config *cfg, const char *list)
{
    for (int i = 0; i < cfg->n_listen; i++)
        xfree(cfg->listen_addrs[i]);
    cfg->n_listen = 0;
    const char *p = list;
    while (*p && cfg->n_listen < SRV_MAX_LISTEN) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n)
            cfg->listen_addrs[cfg->n_listen++] = xstrndup(p, n);
        if (!c)
            break;
        p = c + 1;
    }
}

static void config_init(struct srv_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->port = 8188;
    cfg->max_upload_bytes = 100u * 1024 * 1024;
    cfg->log_level = LOG_INFO;
    cfg->cache_mode = GRAPH_CACHE_CLASSIC;
    cfg->preview_method = GRAPH_PREVIEW_NONE;
    cfg->preview_size = 512;
    cfg->affinity_s = -1;
    mm_config_init(&cfg->mm);
    cfg->device_spec = xstrdup("auto");
    cfg->hash_function = xstrdup("sha256");
    listen_set(cfg, "127.0.0.1");
}

/* Apply one flag with its values (vals[0..nv)). */
static int apply(struct srv_config *cfg, const struct flag *f, char **vals, int nv, char **dirs,
                 struct err *e)
{
    long l;
    double d;
    const char *v = nv ? vals[0] : NULL;
    switch (f->id) {
    case F_LISTEN: listen_set(cfg, v ? v : "0.0.0.0,::"); break;
    case F_PORT:
        if (parse_int(v, 0, 65535, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid port '%s'", v);
        cfg->port = (int)l;
        break;
    case F_PORT_FILE: set_str(&cfg->port_file, v); break;
    case F_TLS_KEY: set_str(&cfg->tls_keyfile, v); break;
    case F_TLS_CERT: set_str(&cfg->tls_certfile, v); break;
    case F_CORS: set_str(&cfg->cors_origin, v ? v : "*"); break;
    case F_MAX_UPLOAD:
        if (parse_float(v, &d) < 0 || d < 0)
            return err_set(e, ERR_INVALID, "invalid --max-upload-size '%s'", v);
        cfg->max_upload_bytes = (size_t)(d * 1024 * 1024);
        break;
    case F_HEAD_TIMEOUT:
    case F_BODY_TIMEOUT:
        if (parse_float(v, &d) < 0 || d < 0.001 || d > 86400)
            return err_set(e, ERR_INVALID, "invalid %s '%s'", f->name, v);
        *(f->id == F_HEAD_TIMEOUT ? &cfg->head_timeout_ms : &cfg->body_timeout_ms) =
            (int)(d * 1000);
        break;
    case F_MAX_CONNS:
    case F_MAX_CONNS_IP:
        if (parse_int(v, 1, 1000000, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid %s '%s'", f->name, v);
        *(f->id == F_MAX_CONNS ? &cfg->max_connections : &cfg->max_connections_per_ip) = (int)l;
        break;
    case F_COMPRESS: cfg->compress = 1; break;
    case F_MULTI_USER: cfg->multi_user = 1; break;
    case F_DONT_PRINT: cfg->dont_print_server = 1; break;
    case F_VERBOSE:
        if (!v)
            cfg->log_level = LOG_DEBUG;
        else if (log_parse_level(v, &cfg->log_level) < 0)
            return err_set(e, ERR_INVALID, "invalid --verbose level '%s'", v);
        break;
    case F_LOG_STDOUT: cfg->log_stdout = 1; break;
    case F_BASE_DIR: dirs[0] = (char *)v; break;
    case F_OUTPUT_DIR: dirs[1] = (char *)v; break;
    case F_INPUT_DIR: dirs[2] = (char *)v; break;
    case F_TEMP_DIR: dirs[3] = (char *)v; break;
    case F_USER_DIR: dirs[4] = (char *)v; break;
    case F_FRONT_END_ROOT: dirs[5] = (char *)v; break;
    case F_DATABASE_URL: dirs[6] = (char *)v; break;
    case F_CPU: set_str(&cfg->device_spec, "cpu"); break;
    case F_GPU_ONLY: cfg->mm.vram_state = MM_VRAM_HIGH_VRAM; break;
    case F_HIGHVRAM: cfg->mm.vram_state = MM_VRAM_HIGH_VRAM; break;
    case F_NORMALVRAM: cfg->mm.vram_state = MM_VRAM_NORMAL_VRAM; break;
    case F_LOWVRAM: cfg->mm.vram_state = MM_VRAM_LOW_VRAM; break;
    case F_NOVRAM: cfg->mm.vram_state = MM_VRAM_NO_VRAM; break;
    case F_RESERVE_VRAM:
        if (parse_float(v, &d) < 0 || d < 0)
            return err_set(e, ERR_INVALID, "invalid --reserve-vram '%s'", v);
        cfg->mm.reserve_vram = (size_t)(d * 1024 * 1024 * 1024);
        /* TODO(cfg): 0 keeps the default reserve, as latentd always did; ComfyUI reserves
         * nothing then. Kept so that this refactor changes no behaviour. */
        cfg->mm.reserve_set = cfg->mm.reserve_vram != 0;
        break;
    case F_DISABLE_SMART_MEMORY: cfg->mm.disable_smart_memory = 1; break;
    case F_CUDA_DEVICE: {
        if (parse_int(v, 0, 1024, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid --cuda-device '%s'", v);
        char spec[32];
        snprintf(spec, sizeof(spec), "cuda:%ld", l);
        set_str(&cfg->device_spec, spec);
        break;
    }
    case F_DEVICE: set_str(&cfg->device_spec, v); break;
    case F_VRAM_BUDGET:
        if (bytesize_parse(v, &cfg->mm.vram_budget) < 0)
            return err_set(e, ERR_INVALID, "invalid --vram-budget '%s'", v);
        break;
    case F_ASYNC_OFFLOAD: cfg->mm.async_offload = -1; break; /* the default depth */
    case F_DISABLE_ASYNC_OFFLOAD: cfg->mm.async_offload = 0; break;
    case F_DISABLE_PINNED: cfg->mm.disable_pinned_memory = 1; break;
    case F_CACHE_CLASSIC: cfg->cache_mode = GRAPH_CACHE_CLASSIC; break;
    case F_CACHE_LRU:
        if (parse_int(v, 0, INT_MAX, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid --cache-lru '%s'", v);
        cfg->cache_mode = GRAPH_CACHE_LRU;
        cfg->cache_lru_size = (int)l;
        break;
    case F_CACHE_NONE: cfg->cache_mode = GRAPH_CACHE_NONE; break;
    case F_PREVIEW_METHOD:
        if (strcmp(v, "none") == 0)
            cfg->preview_method = GRAPH_PREVIEW_NONE;
        else if (strcmp(v, "auto") == 0)
            cfg->preview_method = GRAPH_PREVIEW_AUTO;
        else if (strcmp(v, "latent2rgb") == 0)
            cfg->preview_method = GRAPH_PREVIEW_LATENT2RGB;
        else if (strcmp(v, "taesd") == 0) {
            /* No TAESD decoder here; ComfyUI itself falls back to latent2rgb without one. */
            log_info("notice: '--preview-method taesd' uses latent2rgb (no taesd decoder)");
            cfg->preview_method = GRAPH_PREVIEW_LATENT2RGB;
        } else
            return err_set(e, ERR_INVALID, "invalid --preview-method '%s'", v);
        break;
    case F_PREVIEW_SIZE:
        if (parse_int(v, 1, 16384, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid --preview-size '%s'", v);
        cfg->preview_size = (int)l;
        break;
    case F_DISABLE_METADATA: cfg->disable_metadata = 1; break;
    case F_HASH:
        if (strcmp(v, "md5") && strcmp(v, "sha1") && strcmp(v, "sha256") && strcmp(v, "sha512"))
            return err_set(e, ERR_INVALID, "invalid --default-hashing-function '%s'", v);
        set_str(&cfg->hash_function, v);
        break;
    case F_QUICK_TEST: cfg->quick_test_for_ci = 1; break;
    case F_WORKER: cfg->no_worker = 0; break;
    case F_NO_WORKER: cfg->no_worker = 1; break;
    case F_LEASE:
        if (parse_int(v, 3, 60, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid %s '%s': 3..60 seconds", f->name, v);
        cfg->lease_s = (int)l;
        break;
    case F_AFFINITY:
        if (parse_int(v, 0, 3600, &l) < 0)
            return err_set(e, ERR_INVALID, "invalid %s '%s': 0..3600 seconds", f->name, v);
        cfg->affinity_s = (int)l;
        break;
    case F_HELP: return SRV_CONFIG_EXIT;
    case F_PRECISION:
        return srv_precision_add(&cfg->_precision, f->name, e);
    case F_IGNORED:
        log_info("notice: '%s' accepted for ComfyUI compatibility; it has no effect in latentd",
                 f->name);
        break;
    }
    return 0;
}

static char *database_from_url(const char *url)
{
    /* ComfyUI's form is an SQLAlchemy URL: sqlite:///relative or sqlite:////absolute. */
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        return xstrdup(url); /* libpq's connection URI, kept as given */
    if (strncmp(url, "sqlite:///", 10) == 0)
        url += 10;
    else if (strncmp(url, "sqlite://", 9) == 0)
        url += 9;
    return abs_path(url);
}

int srv_config_parse(struct srv_config *cfg, int argc, char **argv, const char *builtin_web_dir,
                     struct err *e)
{
    config_init(cfg);
    cfg->argc = argc;
    cfg->argv = argv;
    /* base, output, input, temp, user, web, database: resolved after all flags are read. */
    char *dirs[7] = {0};
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const struct flag *f = flag_find(a, nlen);
        if (!f) {
            rc = err_set(e, ERR_INVALID, "unknown flag '%s' (see --help)", a);
            goto fail;
        }
        char *vals[64];
        int nv = 0;
        if (eq) {
            if (f->arg == FLAG_NONE) {
                rc = err_set(e, ERR_INVALID, "flag '%.*s' takes no value", (int)nlen, a);
                goto fail;
            }
            vals[nv++] = (char *)eq + 1;
        } else if (f->arg == FLAG_ONE) {
            if (i + 1 >= argc) {
                rc = err_set(e, ERR_INVALID, "flag '%s' needs a value", a);
                goto fail;
            }
            vals[nv++] = argv[++i];
        } else if (f->arg == FLAG_OPTIONAL) {
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                vals[nv++] = argv[++i];
        } else if (f->arg == FLAG_MANY) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && nv < 64)
                vals[nv++] = argv[++i];
        }
        if ((rc = apply(cfg, f, vals, nv, dirs, e)) != 0)
            goto fail; /* --help (SRV_CONFIG_EXIT) or an error: nothing to keep */
    }
    srv_precision_resolve(&cfg->_precision, cfg->mm.precision);
    if (cfg->tls_keyfile || cfg->tls_certfile)
        log_info("notice: TLS flags accepted; latentd serves plain HTTP (put a TLS proxy in front)");

    /* ComfyUI's default base is the program's directory; ours is the directory of the
     * latentd binary (build/ for build/latentd). The current directory would be wrong:
     * run from the source tree, models/ would land inside the C sources' models/. */
    if (dirs[0]) {
        cfg->base_dir = abs_path(dirs[0]);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n > 0) {
            exe[n] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash && slash != exe)
                *slash = '\0';
            cfg->base_dir = abs_path(exe);
        } else {
            cfg->base_dir = abs_path(".");
        }
    }
    cfg->models_dir = join(cfg->base_dir, "models");
    cfg->output_dir = dirs[1] ? abs_path(dirs[1]) : join(cfg->base_dir, "output");
    cfg->input_dir = dirs[2] ? abs_path(dirs[2]) : join(cfg->base_dir, "input");
    if (dirs[3]) {
        char *t = abs_path(dirs[3]);
        cfg->temp_dir = join(t, "temp"); /* ComfyUI appends "temp" to --temp-directory */
        xfree(t);
    } else {
        cfg->temp_dir = join(cfg->base_dir, "temp");
    }
    if (dirs[4]) {
        cfg->user_dir = abs_path(dirs[4]);
        cfg->user_dir_given = 1;
        struct stat st;
        if (stat(cfg->user_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            rc = err_set(e, ERR_NOT_FOUND, "user directory '%s' does not exist", cfg->user_dir);
            goto fail;
        }
    } else {
        cfg->user_dir = join(cfg->base_dir, "user");
    }
    cfg->web_dir = dirs[5] ? abs_path(dirs[5]) : xstrdup(builtin_web_dir);
    if (dirs[5]) {
        struct stat st;
        if (stat(cfg->web_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            rc = err_set(e, ERR_NOT_FOUND, "front-end root '%s' does not exist", cfg->web_dir);
            goto fail;
        }
    }
    cfg->database_path = dirs[6] ? database_from_url(dirs[6]) : join(cfg->user_dir, "latentd.db");
    cfg->mm.device_spec = cfg->device_spec; /* set_str may have replaced it until now */
    return SRV_CONFIG_RUN;
fail:
    srv_config_release(cfg);
    return rc;
}

void srv_config_release(struct srv_config *cfg)
{
    for (int i = 0; i < cfg->n_listen; i++)
        xfree(cfg->listen_addrs[i]);
    cfg->n_listen = 0;
    char **owned[] = {&cfg->port_file, &cfg->tls_keyfile, &cfg->tls_certfile, &cfg->cors_origin,
                      &cfg->base_dir, &cfg->models_dir, &cfg->output_dir, &cfg->input_dir,
                      &cfg->temp_dir, &cfg->user_dir, &cfg->web_dir, &cfg->database_path,
                      &cfg->device_spec, &cfg->hash_function};
    for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++) {
        xfree(*owned[i]);
        *owned[i] = NULL;
    }
}

void srv_config_to_graph(const struct srv_config *cfg, struct graph_config *gc)
{
    memset(gc, 0, sizeof(*gc));
    gc->base_dir = cfg->base_dir;
    gc->models_dir = cfg->models_dir;
    gc->input_dir = cfg->input_dir;
    gc->output_dir = cfg->output_dir;
    gc->temp_dir = cfg->temp_dir;
    gc->cache_mode = cfg->cache_mode;
    gc->cache_lru_size = cfg->cache_lru_size;
    gc->preview_method = cfg->preview_method;
    gc->preview_size = cfg->preview_size;
    gc->disable_metadata = cfg->disable_metadata;
    gc->mm = &cfg->mm;
}
