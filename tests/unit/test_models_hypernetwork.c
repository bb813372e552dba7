/*
 * test_models_hypernetwork — hypernetwork files (models/hypernetwork.c) against a float64
 * reference: the committed tiny .pt files and reference outputs of tools/
 * hypernetwork_fixtures.py (torch.save'd A1111-format dicts; an independent float64
 * transcription of ComfyUI's load_hypernetwork_patch). Four files cover relu with
 * LayerNorm and dropout, mish with activate_output, hardswish ("swish") with a 1.5x
 * hidden width, and linear with LayerNorm; both widths (8, 12), key and value modules.
 * Also: a width with no module passes through; a file that is no hypernetwork and a
 * missing file are refused with messages (a .safetensors one is test_sd_hypernetwork's).
 *
 * usage: test_models_hypernetwork FIXTURE_DIR
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "harness.h"
#include "hypernetwork.h"
#include "hypernetwork_fixture.h"

/* The fixture arrays by (case, dim, which); NULL past the end. */
static const double *ref_in(int c, int dim)
{
#define IN(ci, d) if (c == ci && dim == d) return hn_in_##ci##_##d;
    IN(0, 8) IN(0, 12) IN(1, 8) IN(1, 12) IN(2, 8) IN(2, 12) IN(3, 8) IN(3, 12)
#undef IN
    return NULL;
}

static const double *ref_out(int c, int dim, int w)
{
#define OUT(ci, d)                                                                             \
    if (c == ci && dim == d)                                                                   \
        return w ? hn_out_##ci##_##d##_1 : hn_out_##ci##_##d##_0;
    OUT(0, 8) OUT(0, 12) OUT(1, 8) OUT(1, 12) OUT(2, 8) OUT(2, 12) OUT(3, 8) OUT(3, 12)
#undef OUT
    return NULL;
}

int main(int argc, char **argv)
{
    long live0 = alloc_live_count();
    if (argc < 2) {
        printf("usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    static const enum hn_act acts[] = {HN_ACT_RELU, HN_ACT_MISH, HN_ACT_SWISH, HN_ACT_LINEAR};
    char path[512];
    for (int c = 0; c < (int)(sizeof hn_files / sizeof hn_files[0]); c++) {
        snprintf(path, sizeof path, "%s/%s", argv[1], hn_files[c]);
        struct hypernetwork *h = NULL;
        struct err e = {0};
        int rc = hypernetwork_load(path, &h, &e);
        ok(rc == 0, "%s loads (%s)", hn_files[c], rc ? e.msg : "ok");
        if (rc < 0)
            continue;
        int n = 0;
        const int *dims = hypernetwork_dims(h, &n);
        ok(n == 2 && dims[0] == 8 && dims[1] == 12 && hypernetwork_activation(h) == acts[c],
           "%s: widths 8 and 12, its activation", hn_files[c]);
        double worst = 0;
        for (int d = 0; d < 2; d++) {
            int dim = hn_dims[d];
            const double *x = ref_in(c, dim);
            float xf[HN_ROWS * 12], y[HN_ROWS * 12];
            for (int i = 0; i < HN_ROWS * dim; i++)
                xf[i] = (float)x[i];
            for (int w = 0; w < 2; w++) {
                const double *want = ref_out(c, dim, w);
                int applied = hypernetwork_apply(h, dim, w, (float)HN_STRENGTH, xf, HN_ROWS, y);
                for (int i = 0; applied && i < HN_ROWS * dim; i++) {
                    double err = fabs(y[i] - want[i]) / (fabs(want[i]) + 1e-3);
                    worst = err > worst ? err : worst;
                }
                if (!applied)
                    worst = INFINITY;
            }
        }
        ok(worst < 2e-5, "%s: k + m0(k) * %.1f and v + m1(v) * %.1f against float64 (worst rel "
           "err %.2e)", hn_files[c], HN_STRENGTH, HN_STRENGTH, worst);
        float z[16] = {0}, zo[16] = {1};
        ok(hypernetwork_apply(h, 16, 0, 1.0f, z, 1, zo) == 0 && zo[0] == 1.0f,
           "%s: a width without a module is not patched", hn_files[c]);
        hypernetwork_free(h);
    }
    struct hypernetwork *h = NULL;
    struct err e = {0};
    snprintf(path, sizeof path, "%s/nope.pt", argv[1]);
    ok(hypernetwork_load(path, &h, &e) < 0 && !h && strstr(e.msg, "cannot read"), "%s", e.msg);
    snprintf(path, sizeof path, "%s/../object_info/nodes_mask.json", argv[1]);
    e = (struct err){0};
    ok(hypernetwork_load(path, &h, &e) == ERR_INVALID && !h && strstr(e.msg, "not a hypernetwork"),
       "not a .pt: %s", e.msg);
    ok(alloc_live_count() == live0, "no allocation left live (%ld)", alloc_live_count() - live0);
    return harness_done();
}
