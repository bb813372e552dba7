#include "node_builtin.h"

void node_registry_add_builtins(struct node_registry *r)
{
    nodes_image_register(r);
    nodes_image_extras_register(r);
    nodes_image_post_register(r);
    nodes_image_compositing_register(r);
    nodes_primitive_register(r);
    nodes_sd_register(r);
    nodes_sd_loaders_register(r);
    nodes_mask_register(r);
    nodes_string_register(r);
    nodes_string_regex_register(r);
    nodes_rebatch_register(r);
    nodes_upscale_model_register(r);
    /* custom_nodes load after comfy_extras. */
    nodes_websocket_register(r);
}
