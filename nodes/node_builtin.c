#include "err.h"
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
    /* Every built-in class reads its inputs by index (issue 12), so each states its
     * enum's count; node_registry_add checked the counts that are stated, this makes
     * stating one mandatory here (test classes elsewhere may still leave it 0). */
    for (size_t i = 0; i < node_registry_count(r); i++) {
        const struct node_class *cls = node_registry_at(r, i);
        if (cls->n_inputs == 0 && node_class_n_inputs(cls) > 0)
            PANIC("node class '%s' declares inputs but no input index count (.n_inputs)",
                  cls->name);
    }
}
