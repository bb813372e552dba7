/*
 * fuzz_upload_image — the image bytes of /upload/image and /upload/mask as the server
 * reads them (server/srv_image.h): srv_image_decode (PNG via libpng's simplified API,
 * JPEG via libjpeg-turbo, sniffed by signature) and srv_png_text_read (the text chunks
 * kept from an original image), then the alpha edits /upload/mask and /view apply.
 *
 * Contract checked: decode gives 0 with w, h > 0, 4 channels and pixels, or an error
 * with a message; small decoded images survive a PNG encode and decode unchanged;
 * text chunks come back as key/text strings; nothing stays allocated
 * (alloc_live_count() balance).
 */
#include "fuzz_util.h"
#include "srv_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static void check_roundtrip(const struct srv_image *img)
{
    if ((size_t)img->w * img->h > 4096)
        return;
    void *png = NULL;
    size_t pn = 0;
    srv_image_png(img, 4, &png, &pn);
    FUZZ_CHECK(png != NULL && pn > 8);
    struct srv_image back;
    struct err e = {0};
    FUZZ_CHECK(srv_image_decode(png, pn, &back, &e) == 0);
    FUZZ_CHECK(back.w == img->w && back.h == img->h && back.channels == 4);
    FUZZ_CHECK(memcmp(back.px, img->px, (size_t)img->w * img->h * 4) == 0);
    srv_image_release(&back);
    xfree(png);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    static int init;
    if (!init++)
        fuzz_quiet_logs();
    long live = alloc_live_count();
    struct srv_image img;
    struct err e = {0};
    int rc = srv_image_decode(data, n, &img, &e);
    if (rc < 0) {
        FUZZ_CHECK(e.msg[0] != '\0' && img.px == NULL);
    } else {
        FUZZ_CHECK(img.w > 0 && img.h > 0 && img.channels == 4 && img.px != NULL);
        check_roundtrip(&img);
        struct srv_image mask = img;
        mask.px = xmalloc((size_t)img.w * img.h * 4);
        memcpy(mask.px, img.px, (size_t)img.w * img.h * 4);
        srv_image_alpha_only(&mask);
        srv_image_set_alpha_from(&img, &mask);
        FUZZ_CHECK(srv_image_drop_alpha(&img) == 3);
        srv_image_release(&mask);
        srv_image_release(&img);
    }
    struct srv_png_text *t = NULL;
    int nt = srv_png_text_read(data, n, &t);
    FUZZ_CHECK(nt >= 0);
    for (int i = 0; i < nt; i++)
        FUZZ_CHECK(t[i].key != NULL && t[i].text != NULL);
    srv_png_text_free(t, nt);
    FUZZ_CHECK(alloc_live_count() == live);
    return 0;
}
