/*
 * gen_upscale — write a deterministic random-weight upscale model (the CLI of
 * tools/upscale_gen.h). Usage: gen_upscale --help.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "upscale_gen.h"

static void usage(FILE *fp)
{
    fputs("usage: gen_upscale [options] OUT.safetensors\n"
          "  --arch esrgan|esrgan-old|srvgg  RRDBNet in new (conv_first, body.N.rdbK) or old\n"
          "                      (model.N, model.1.sub.N.RDBK) naming, or SRVGGNetCompact\n"
          "                      (default esrgan)\n"
          "  --scale 1|2|4|8     (default 4; esrgan 1 and 2 take a pixel-unshuffled input)\n"
          "  --nf N --nb N --gc N  widths: features, blocks (srvgg: body convs), growth\n"
          "                      (tiny default 8 / 2 / 4)\n"
          "  --full              ESRGAN's real widths: nf 64, nb 23, gc 32 (srvgg: 64 / 32)\n"
          "  --dtype f32|f16|bf16  (default f32)\n"
          "  --seed N            (default 7)\n",
          fp);
}

int main(int argc, char **argv)
{
    struct upscale_gen_opts o;
    const char *out = NULL, *arch = "esrgan";
    int scale = 4, nf = 0, nb = 0, gc = 0, full = 0;
    enum st_dtype dt = ST_DTYPE_F32;
    uint64_t seed = 7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--full")) {
            full = 1;
        } else if (v && !strcmp(a, "--arch")) {
            arch = v, i++;
        } else if (v && !strcmp(a, "--scale")) {
            scale = atoi(v), i++;
        } else if (v && !strcmp(a, "--nf")) {
            nf = atoi(v), i++;
        } else if (v && !strcmp(a, "--nb")) {
            nb = atoi(v), i++;
        } else if (v && !strcmp(a, "--gc")) {
            gc = atoi(v), i++;
        } else if (v && !strcmp(a, "--seed")) {
            seed = strtoull(v, NULL, 10), i++;
        } else if (v && !strcmp(a, "--dtype")) {
            dt = !strcmp(v, "f16") ? ST_DTYPE_F16 : !strcmp(v, "bf16") ? ST_DTYPE_BF16 : ST_DTYPE_F32;
            i++;
        } else if (a[0] != '-' && !out) {
            out = a;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!out || (scale != 1 && scale != 2 && scale != 4 && scale != 8)) {
        usage(stderr);
        return 2;
    }
    int srvgg = !strcmp(arch, "srvgg");
    if (!srvgg && strcmp(arch, "esrgan") && strcmp(arch, "esrgan-old")) {
        usage(stderr);
        return 2;
    }
    upscale_gen_opts_tiny(&o, srvgg ? UPS_SRVGG : UPS_ESRGAN, scale);
    if (!strcmp(arch, "esrgan-old"))
        o.arch.naming = UPS_NAMING_OLD;
    if (full) {
        o.arch.nf = 64;
        o.arch.nb = srvgg ? 32 : 23;
        o.arch.gc = 32;
    }
    if (nf > 0)
        o.arch.nf = nf;
    if (nb > 0)
        o.arch.nb = nb;
    if (gc > 0)
        o.arch.gc = gc;
    o.dtype = dt;
    o.seed = seed;
    struct err e = {0};
    if (upscale_gen_write(&o, out, &e) < 0) {
        fprintf(stderr, "gen_upscale: %s\n", e.msg);
        return 1;
    }
    return 0;
}
