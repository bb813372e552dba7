/*
 * nodes_image — ComfyUI's image nodes that need no model, in three files:
 * nodes.py's (nodes_image.c: LoadImage, LoadImageOutput, SaveImage, ImageScale, ...),
 * comfy_extras/nodes_images.py's (nodes_image_extras.c: RepeatImageBatch,
 * ImageFromBatch, ImageAddNoise, ImageStitch, ResizeAndPadImage, GetImageSize,
 * ImageRotate, ImageFlip, ImageScaleToMaxDimension, and SaveAnimatedPNG from
 * nodes_image_apng.c; ImageCrop lives with nodes.py's) and
 * comfy_extras/nodes_post_processing.py's (nodes_image_post.c: ImageBlend,
 * ImageBlur, ImageSharpen, ImageScaleToTotalPixels; nodes_image_quantize.c:
 * ImageQuantize) and
 * comfy_extras/nodes_compositing.py's (nodes_image_compositing.c:
 * PorterDuffImageComposite, SplitImageWithAlpha, JoinImageWithAlpha).
 *
 * The register functions are declared in node_builtin.h.
 *
 * Threads: register before the registry is shared; nodes run on the executor.
 */
#ifndef LATENTD_NODES_NODES_IMAGE_H
#define LATENTD_NODES_NODES_IMAGE_H

#include <stdint.h>

#include "buf.h"
#include "node_registry.h"

/* nodes.MAX_RESOLUTION */
#define NODES_IMAGE_MAX_RESOLUTION 16384

/*
 * Input `index` (the class's declared order) as an IMAGE [B,H,W,C]: *img borrowed.
 * Returns 0, or <0 after node_fail when it is not a 4-d tensor. (nodes_image.c)
 */
int nodes__image_in_at(struct node_ctx *c, int index, const struct value **img);

/*
 * Resize an IMAGE to w x h with `method` (node_img_upscale_methods) and set it as
 * output 0; crop_center as common_upscale's crop. Returns 0, or <0 after node_fail.
 * (nodes_image.c)
 */
int nodes__image_scale_to(struct node_ctx *c, const struct value *img, int64_t w, int64_t h,
                          const char *method, int crop_center);

/*
 * Expand a save prefix's %width% %height% %year% %month% %day% %hour% %minute% %second%
 * (comfy-api.md §8.1 step 1) into `out` (appended). (nodes_image.c)
 */
void nodes__image_expand_prefix(const char *prefix, int w, int h, struct buf *out);

/* The classes, for tests that run a node directly. */
extern const struct node_class nodes_repeat_image_batch;
extern const struct node_class nodes_image_from_batch;
extern const struct node_class nodes_image_add_noise;
extern const struct node_class nodes_save_animated_png;
extern const struct node_class nodes_image_stitch;
extern const struct node_class nodes_resize_and_pad_image;
extern const struct node_class nodes_get_image_size;
extern const struct node_class nodes_image_rotate;
extern const struct node_class nodes_image_flip;
extern const struct node_class nodes_image_scale_to_max_dimension;
extern const struct node_class nodes_image_blend;
extern const struct node_class nodes_image_blur;
extern const struct node_class nodes_image_sharpen;
extern const struct node_class nodes_image_quantize;
extern const struct node_class nodes_image_scale_to_total_pixels;
extern const struct node_class nodes_porter_duff_image_composite;
extern const struct node_class nodes_split_image_with_alpha;
extern const struct node_class nodes_join_image_with_alpha;

#endif
