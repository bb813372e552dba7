/*
 * fuzz_image_load — LoadImage's decoder (nodes/node_imageio.h, node_image_load): PNG
 * via libpng, JPEG via libjpeg-turbo (both with EXIF orientation), GIF through our own
 * decoder (nodes/node_gif.c), sniffed by content. An uploaded file reaches it unchanged.
 *
 * node_image_load reads a path, so each input is written to one private temporary
 * file (in /dev/shm when present, to keep the disk out of the loop).
 *
 * Contract checked: 0 with >= 1 frames of equal size, w, h > 0, 1..4 channels and
 * pixels; or an error with a message and nothing allocated; the decompression-bomb
 * limit holds; nothing stays allocated (alloc_live_count() balance).
 */
#include <unistd.h>

#include "fuzz_util.h"
#include "node_imageio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static char path[64];

static void teardown(void)
{
    unlink(path);
}

static void setup(void)
{
    fuzz_quiet_logs();
    snprintf(path, sizeof(path), "%s/latentd-fuzz-img-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    int fd = mkstemp(path);
    FUZZ_CHECK(fd >= 0);
    close(fd);
    atexit(teardown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (!path[0])
        setup();
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL);
    FUZZ_CHECK(fwrite(data, 1, n, f) == n);
    FUZZ_CHECK(fclose(f) == 0);

    long live = alloc_live_count();
    struct node_image_file img;
    struct err e = {0};
    int rc = node_image_load(path, &img, &e);
    if (rc < 0) {
        FUZZ_CHECK(e.code == rc && e.msg[0] != '\0');
        FUZZ_CHECK(img.n_frames == 0 && img.frames == NULL);
    } else {
        FUZZ_CHECK(rc == 0 && img.n_frames >= 1 && img.frames != NULL);
        const struct node_pixels *p0 = &img.frames[0];
        for (int i = 0; i < img.n_frames; i++) {
            const struct node_pixels *p = &img.frames[i];
            FUZZ_CHECK(p->w > 0 && p->h > 0 && p->c >= 1 && p->c <= 4 && p->px != NULL);
            FUZZ_CHECK(p->w == p0->w && p->h == p0->h);
            FUZZ_CHECK((uint64_t)p->w * (uint64_t)p->h <= NODE_IMAGE_MAX_PIXELS);
            /* Touch the last byte: the buffer must really hold w*h*c bytes. */
            volatile uint8_t last = p->px[(size_t)p->w * p->h * p->c - 1];
            (void)last;
        }
    }
    node_image_file_release(&img);
    FUZZ_CHECK(alloc_live_count() == live);
    return 0;
}
