/*
 * SaveImageWebsocket (ComfyUI's custom_nodes/websocket_image_save.py): sends each
 * image of the batch to the prompt's client as a binary PNG frame, in the format
 * of the previews ([u32 1][u32 2][PNG]), and saves nothing. ComfyUI sends it
 * through its progress bar (update_absolute(i, batch, ("PNG", img, None))), so
 * each frame comes with progress_state/progress messages for value i of the
 * batch, and all of them arrive between this node's `executing` and the next
 * one: websockets_api_example_ws_images.py relies on that to collect them.
 */
#include <stdint.h>

#include "alloc.h"
#include "node_builtin.h"
#include "node_registry.h"
#include "nodes_image.h"

/* PIL's Image.fromarray(np.clip(255. * image, 0, 255).astype(np.uint8)): truncation. */
static void to_u8(const float *src, size_t n, uint8_t *px)
{
    for (size_t k = 0; k < n; k++) {
        float v = 255.0f * src[k];
        px[k] = (uint8_t)(v <= 0 || v != v ? 0 : v >= 255 ? 255 : (int)v);
    }
}

enum { WS_IMAGES, WS_N };
static const struct node_input_def ws_save_in[] = {{.name = "images", .type = "IMAGE"},
                                                    NODE_INPUTS_END};

static int ws_save_run(struct node_ctx *c)
{
    const struct value *img;
    int rc = nodes__image_in_at(c, WS_IMAGES, &img);
    if (rc < 0)
        return rc;
    int64_t b = img->shape[0], h = img->shape[1], w = img->shape[2], ch = img->shape[3];
    if (ch != 3 && ch != 4)
        return node_fail(c, "TypeError", "Cannot handle this data type: (1, 1, %lld), |u1",
                         (long long)ch);
    size_t per = (size_t)(h * w * ch);
    uint8_t *px = xmalloc(per); /* one image; the IMAGE value already holds 4x that */
    for (int64_t i = 0; i < b && rc == 0; i++) {
        to_u8(img->data + (size_t)i * per, per, px);
        rc = node_progress_image(c, (double)i, (double)b, px, (int)w, (int)h, (int)ch);
    }
    xfree(px);
    return rc;
}

/* IS_CHANGED returns time.time(): the node never comes from the cache. */
static int ws_save_is_changed(struct node_ctx *c, struct buf *out)
{
    (void)c;
    (void)out;
    return -1;
}

static const struct node_output_def no_outputs[] = {NODE_OUTPUTS_END};

static const struct node_class save_image_websocket = {
    .name = "SaveImageWebsocket",
    .category = "api/image",
    .python_module = "custom_nodes.websocket_image_save",
    .flags = NODE_CLASS_OUTPUT,
    .inputs = ws_save_in,
    .n_inputs = WS_N,
    .outputs = no_outputs,
    .run = ws_save_run,
    .is_changed = ws_save_is_changed,
};

void nodes_websocket_register(struct node_registry *r)
{
    node_registry_add(r, &save_image_websocket);
}
