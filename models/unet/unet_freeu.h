/*
 * unet_freeu — ComfyUI's FreeU and FreeU_V2 (comfy_extras/nodes_freelunch.py) as a
 * UNet output-block patch (unet.h struct unet_patches).
 *
 * On the output side, where the hidden state h has 4·model_ch channels (b1, s1) or
 * 2·model_ch (b2, s2): the first half of h's channels is scaled by b (FreeU) or by
 * (b − 1)·m + 1 with m the channel mean of h min-max normalised per sample (FreeU_V2),
 * and the skip is Fourier-filtered: its centred low-frequency box (threshold 1) scaled
 * by s.
 *
 * Fourier_filter only scales a box of frequencies, so ifft(mask·fft(x)) = x + (s − 1)·
 * ifft(box·fft(x)): with threshold 1 the box holds, before fftshift, the frequencies
 * {0, −1} on each axis (one frequency on an axis of length 1), so the filter is a
 * direct DFT of those at most four coefficients per plane and their inverse, O(h·w)
 * each, in double (PyTorch's runs a complex64 FFT; results agree to float32 rounding).
 *
 * The arithmetic runs on the host (tensor_read_f32 / tensor_write_f32), as ComfyUI
 * falls back to the CPU where a device lacks torch.fft. Threads: executor thread.
 */
#ifndef LATENTD_MODELS_UNET_FREEU_H
#define LATENTD_MODELS_UNET_FREEU_H

#include "unet.h"

struct unet_freeu {
    int v2;        /* FreeU_V2 */
    int model_ch;  /* the UNet's model_channels */
    double b1, b2; /* backbone factors for 4·model_ch and 2·model_ch channels */
    double s1, s2; /* skip factors for the same */
};

/*
 * Fourier_filter(x, threshold, scale) in place on x [planes, h, w] (float32): the
 * shifted box [h/2 − t, h/2 + t) x [w/2 − t, w/2 + t) (Python slices) scaled by scale.
 */
void unet_fourier_filter(float *x, int64_t planes, int h, int w, int threshold, double scale);

/*
 * The backbone half of the patch on h [b, c, hh, ww] (host floats): FreeU's
 * h[:, :c/2] *= factor, or FreeU_V2's per-pixel (factor − 1)·m + 1.
 */
void unet_freeu_scale(const struct unet_freeu *f, float *h, int b, int c, int hh, int ww,
                      double factor);

/* The output_block patch (user = a struct unet_freeu, borrowed for the eval). */
int unet_freeu_output_block(void *user, int i, struct tensor *h, struct tensor *hsp,
                            struct err *e);

#endif
