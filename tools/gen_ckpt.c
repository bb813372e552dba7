/*
 * gen_ckpt — write a deterministic random-weight SD1.5 checkpoint (the CLI of
 * tools/ckpt_gen.h). Usage: gen_ckpt --help.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_gen.h"
#include "family.h"

static void usage(FILE *fp)
{
    fputs("usage: gen_ckpt [options] OUT.safetensors\n"
          "  --tiny              tiny config (default): UNet 32 [1,2,3,3], CLIP 64x3, VAE 32\n"
          "  --small             smallest config: UNet 32 [1,1,1,1], VAE 32 [1,1,1,1]\n"
          "  --full              SD1.5 widths (~1.07 G parameters; ~2 GiB as f16)\n"
          "  --dtype f32|f16|bf16  storage dtype (default f32)\n"
          "  --seed N            weight seed (default 42)\n"
          "  --depth N           transformer depth (default 1)\n"
          "  --clip-layers N     CLIP layers (tiny default 3)\n"
          "  --extras            add model_ema.*, schedule buffers, position_ids (ignored)\n"
          "  --old-clip-names    cond_stage_model.transformer.* without text_model.\n"
          "  --conv-2d           store 1x1 conv weights (proj_in/out, VAE attn) as 2-D\n"
          "  --metadata          add a __metadata__ block\n"
          "  --embed-f16         store the CLIP token table as F16\n"
          "  --arch sdxl         an SDXL base checkpoint (sdxl.md key layout; tiny, or\n"
          "                      SDXL widths with --full; --depth and --clip-layers ignored)\n"
          "  --arch sdxl-refiner an SDXL refiner checkpoint (likewise)\n"
          "  --arch sd2          an SD2.x 512 (epsilon) checkpoint: OpenCLIP-H names, 64-wide\n"
          "                      heads, Linear projections (tiny, --small: one width per\n"
          "                      level, or SD2 widths with --full)\n"
          "  --arch sd2-v        the same, with the weights of a 768-v (v-prediction) model\n"
          "  --arch sd2-mark|sdxl-mark|inpaint  an SD1.5 look-alike of another model type\n"
          "  --in-channels N     UNet input channels: 9 an inpainting model, 8 instruct-\n"
          "                      pix2pix (with any --arch; default 4)\n"
          "  --nan NAME          put a NaN into tensor NAME (full name)\n"
          "  --drop NAME         leave tensor NAME out\n"
          "  --extra NAME        add an unexpected tensor NAME\n"
          "  --no-vae            leave out the VAE\n"
          "  --no-clip           leave out the text encoder\n"
          "  --vae-only          write a standalone VAE file (default naming: --vae-prefix none)\n"
          "  --text-file hf|openclip|prefixed  write one text encoder alone (CLIPLoader files):\n"
          "                      text_model.* names, bare OpenCLIP names, or the checkpoint's;\n"
          "                      the same values as a checkpoint of the same --seed\n"
          "  --text-slot 1|2     with --text-file: the first (CLIP-L, ViT-H) or second (SDXL's\n"
          "                      bigG) text encoder of --arch (default 1)\n"
          "  --vae-prefix none|first_stage_model|diffusers  VAE key naming (default\n"
          "                      first_stage_model in a checkpoint, none with --vae-only)\n"
          "  --truncate N        cut the written file to N bytes (N < 0: drop -N bytes)\n"
          "  --corrupt-header    overwrite the start of the JSON header with garbage\n"
          "  --if-missing        do nothing if OUT already exists\n"
          "  --controlnet        write a ControlNet of the chosen UNet (--tiny, --full,\n"
          "                      --arch sdxl ...) instead of a checkpoint\n"
          "  --cn-prefix control_model|none|diffusers  ControlNet key naming (default\n"
          "                      control_model)\n"
          "  --difference        a diff ControlNet (adds the \"difference\" marker)\n"
          "  --cn-union N        a Union ControlNet of N control types (6; ProMax 8),\n"
          "                      with diffusers names\n"
          "  --cn-lora R         a Control-LoRA of rank R (the UNet's weights + low rank)\n"
          "  --t2i full|light|xl a T2I-Adapter (SD1.5 full or light, SDXL) of the UNet's\n"
          "                      width (--cn-prefix diffusers: diffusers names)\n"
          "  --t2i-hint N        its hint channels (1 or 3, default 3)\n"
          "  --gligen            a GLIGEN model (position net + a fuser per transformer)\n"
          "                      for the chosen UNet, ComfyUI's key layout\n"
          "  --gligen-key-dim N  its object token width (default 768: 8 heads)\n",
          fp);
}

static int parse_dtype(const char *s, enum st_dtype *dt)
{
    if (!strcmp(s, "f32") || !strcmp(s, "fp32"))
        *dt = ST_DTYPE_F32;
    else if (!strcmp(s, "f16") || !strcmp(s, "fp16"))
        *dt = ST_DTYPE_F16;
    else if (!strcmp(s, "bf16"))
        *dt = ST_DTYPE_BF16;
    else
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    struct ckpt_gen_opts o;
    ckpt_gen_opts_default(&o);
    const char *out = NULL, *arch = "sd15", *vae_prefix = NULL;
    long long truncate_to = 0;
    int have_truncate = 0, corrupt = 0, if_missing = 0, depth = 0, clip_layers = 0, in_ch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                     \
    do {                                                                           \
        if (!next) {                                                               \
            fprintf(stderr, "gen_ckpt: '%s' needs a value\n", a);                  \
            return 2;                                                              \
        }                                                                          \
        i++;                                                                       \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--in-channels")) {
            NEED();
            in_ch = atoi(next);
        } else if (!strcmp(a, "--tiny")) {
            sd15_config_tiny(&o.cfg);
        } else if (!strcmp(a, "--small")) {
            sd15_config_tiny(&o.cfg);
            for (int k = 0; k < 4; k++)
                o.cfg.unet.mult[k] = o.cfg.vae.mult[k] = 1;
        } else if (!strcmp(a, "--full")) {
            sd15_config_canonical(&o.cfg);
        } else if (!strcmp(a, "--dtype")) {
            NEED();
            if (parse_dtype(next, &o.dtype) < 0) {
                fprintf(stderr, "gen_ckpt: unknown dtype '%s'\n", next);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            NEED();
            o.seed = strtoull(next, NULL, 0);
        } else if (!strcmp(a, "--depth")) {
            NEED();
            depth = atoi(next);
        } else if (!strcmp(a, "--clip-layers")) {
            NEED();
            clip_layers = atoi(next);
        } else if (!strcmp(a, "--extras")) {
            o.flags |= CKPT_GEN_EXTRAS;
        } else if (!strcmp(a, "--text-file")) {
            NEED();
            o.text_file = !strcmp(next, "hf")         ? CKPT_GEN_TEXT_HF
                          : !strcmp(next, "openclip") ? CKPT_GEN_TEXT_OPENCLIP
                          : !strcmp(next, "prefixed") ? CKPT_GEN_TEXT_PREFIXED
                                                      : -1;
            if (o.text_file < 0) {
                fprintf(stderr, "gen_ckpt: unknown --text-file '%s'\n", next);
                return 2;
            }
        } else if (!strcmp(a, "--text-slot")) {
            NEED();
            o.text_slot = atoi(next) - 1;
            if (o.text_slot != 0 && o.text_slot != 1) {
                fprintf(stderr, "gen_ckpt: --text-slot is 1 or 2\n");
                return 2;
            }
        } else if (!strcmp(a, "--old-clip-names")) {
            o.flags |= CKPT_GEN_OLD_CLIP;
        } else if (!strcmp(a, "--conv-2d")) {
            o.flags |= CKPT_GEN_CONV_2D;
        } else if (!strcmp(a, "--metadata")) {
            o.flags |= CKPT_GEN_METADATA;
        } else if (!strcmp(a, "--embed-f16")) {
            o.flags |= CKPT_GEN_EMBED_F16;
        } else if (!strcmp(a, "--no-vae")) {
            o.flags |= CKPT_GEN_NO_VAE;
        } else if (!strcmp(a, "--no-clip")) {
            o.flags |= CKPT_GEN_NO_CLIP;
        } else if (!strcmp(a, "--vae-only")) {
            o.flags |= CKPT_GEN_VAE_ONLY;
        } else if (!strcmp(a, "--vae-prefix")) {
            NEED();
            vae_prefix = next;
        } else if (!strcmp(a, "--arch")) {
            NEED();
            arch = next;
        } else if (!strcmp(a, "--nan")) {
            NEED();
            o.nan_tensor = next;
        } else if (!strcmp(a, "--drop")) {
            NEED();
            o.drop_tensor = next;
        } else if (!strcmp(a, "--extra")) {
            NEED();
            o.extra_tensor = next;
        } else if (!strcmp(a, "--truncate")) {
            NEED();
            truncate_to = strtoll(next, NULL, 0);
            have_truncate = 1;
        } else if (!strcmp(a, "--corrupt-header")) {
            corrupt = 1;
        } else if (!strcmp(a, "--if-missing")) {
            if_missing = 1;
        } else if (!strcmp(a, "--controlnet")) {
            o.flags |= CKPT_GEN_CONTROLNET;
        } else if (!strcmp(a, "--cn-lora")) {
            NEED();
            o.cn_lora_rank = atoi(next);
            o.flags |= CKPT_GEN_CONTROLNET;
        } else if (!strcmp(a, "--t2i")) {
            NEED();
            o.t2i = !strcmp(next, "light") ? CKPT_GEN_T2I_LIGHT
                    : !strcmp(next, "xl")  ? CKPT_GEN_T2I_XL
                                           : CKPT_GEN_T2I_FULL;
        } else if (!strcmp(a, "--t2i-hint")) {
            NEED();
            o.t2i_hint_ch = atoi(next);
        } else if (!strcmp(a, "--gligen")) {
            o.gligen = 1;
        } else if (!strcmp(a, "--gligen-key-dim")) {
            NEED();
            o.gligen_key_dim = atoi(next);
        } else if (!strcmp(a, "--cn-union")) {
            NEED();
            o.cn_union_types = atoi(next);
            o.flags |= CKPT_GEN_CONTROLNET | CKPT_GEN_CN_DIFFUSERS;
        } else if (!strcmp(a, "--difference")) {
            o.flags |= CKPT_GEN_CN_DIFF;
        } else if (!strcmp(a, "--cn-prefix")) {
            NEED();
            if (!strcmp(next, "none"))
                o.flags |= CKPT_GEN_CN_BARE;
            else if (!strcmp(next, "diffusers"))
                o.flags |= CKPT_GEN_CN_DIFFUSERS;
            else if (strcmp(next, "control_model") != 0) {
                fprintf(stderr, "gen_ckpt: unknown --cn-prefix '%s'\n", next);
                return 2;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "gen_ckpt: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!out) {
            out = a;
        } else {
            fprintf(stderr, "gen_ckpt: more than one output path\n");
            return 2;
        }
    }
    if (!out) {
        usage(stderr);
        return 2;
    }
    if (depth > 0)
        sd15_config_set_depth(&o.cfg, depth);
    if (clip_layers > 0)
        o.cfg.text[0].layers = clip_layers;
    if (!strcmp(arch, "sd2") || !strcmp(arch, "sd2-v")) {
        int small = o.cfg.unet.mult[3] == 1; /* --small: every level one width */
        if (sd15_config_is_canonical(&o.cfg))
            sd2_config_canonical(&o.cfg);
        else
            sd2_config_tiny(&o.cfg);
        for (int k = 0; small && k < 4; k++)
            o.cfg.unet.mult[k] = o.cfg.vae.mult[k] = 1;
        o.cfg.prediction = !strcmp(arch, "sd2-v");
    } else if (!strcmp(arch, "sd2-mark")) {
        o.flags |= CKPT_GEN_OPENCLIP | CKPT_GEN_CONV_2D;
        o.cfg.unet.ctx_dim = 1024;
    } else if (!strcmp(arch, "sdxl")) {
        if (sd15_config_is_canonical(&o.cfg))
            sdxl_config_canonical(&o.cfg);
        else
            sdxl_config_tiny(&o.cfg);
    } else if (!strcmp(arch, "sdxl-refiner")) {
        if (sd15_config_is_canonical(&o.cfg))
            sdxl_refiner_config_canonical(&o.cfg);
        else
            sdxl_refiner_config_tiny(&o.cfg);
    } else if (!strcmp(arch, "sdxl-mark")) {
        o.flags |= CKPT_GEN_SDXL_MARK;
        o.cfg.unet.ctx_dim = 2048;
    } else if (!strcmp(arch, "inpaint")) {
        o.cfg.unet.in_ch = 9;
    } else if (strcmp(arch, "sd15") != 0) {
        fprintf(stderr, "gen_ckpt: unknown --arch '%s'\n", arch);
        return 2;
    }
    if (in_ch > 0) /* after --arch: the family's UNet with concat inputs */
        o.cfg.unet.in_ch = in_ch;
    if (!vae_prefix)
        vae_prefix = (o.flags & CKPT_GEN_VAE_ONLY) ? "none" : "first_stage_model";
    if (!strcmp(vae_prefix, "none")) {
        o.flags |= CKPT_GEN_VAE_BARE;
    } else if (!strcmp(vae_prefix, "diffusers")) {
        o.flags |= CKPT_GEN_VAE_DIFFUSERS;
    } else if (strcmp(vae_prefix, "first_stage_model") != 0) {
        fprintf(stderr, "gen_ckpt: unknown --vae-prefix '%s'\n", vae_prefix);
        return 2;
    }
    if ((o.flags & CKPT_GEN_VAE_ONLY) && (o.flags & CKPT_GEN_NO_VAE)) {
        fprintf(stderr, "gen_ckpt: --vae-only and --no-vae exclude each other\n");
        return 2;
    }
    struct stat sb;
    if (if_missing && stat(out, &sb) == 0)
        return 0;
    struct err e = {0};
    if (ckpt_gen_write(&o, out, &e) < 0) {
        fprintf(stderr, "gen_ckpt: %s\n", e.msg);
        return 1;
    }
    if (corrupt) {
        FILE *fp = fopen(out, "r+b");
        if (!fp || fseek(fp, 8, SEEK_SET) != 0 || fwrite("#garbage", 1, 8, fp) != 8) {
            fprintf(stderr, "gen_ckpt: cannot corrupt '%s'\n", out);
            return 1;
        }
        fclose(fp);
    }
    if (have_truncate) {
        if (stat(out, &sb) != 0)
            return 1;
        long long to = truncate_to >= 0 ? truncate_to : (long long)sb.st_size + truncate_to;
        if (to < 0)
            to = 0;
        if (truncate(out, (off_t)to) != 0) {
            fprintf(stderr, "gen_ckpt: cannot truncate '%s': %s\n", out, strerror(errno));
            return 1;
        }
    }
    return 0;
}
