/*
 * The primitive nodes of current ComfyUI (comfy_extras/nodes_primitive.py):
 * a widget value passed out as a typed output, so one value can feed many inputs.
 */
#include "node_builtin.h"
#include "node_registry.h"

#define PRIM_MODULE "comfy_extras.nodes_primitive"
#define PRIM_CATEGORY "utils/primitive"

/* Every primitive declares one input, its value. */
enum { PRIM_VALUE, PRIM_N };
static const struct node_input_def string_in[] = {{.name = "value", .type = "STRING"}, NODE_INPUTS_END};
static const struct node_input_def string_ml_in[] = {
    {.name = "value", .type = "STRING", .multiline = 1}, NODE_INPUTS_END};
/* sys.maxsize bounds, as ComfyUI declares them. */
static const struct node_input_def int_in[] = {
    {.name = "value", .type = "INT", .min = NODE_I(-9223372036854775807LL),
     .max = NODE_I(9223372036854775807LL), .control_after_generate = 1},
    NODE_INPUTS_END};
static const struct node_input_def float_in[] = {
    {.name = "value", .type = "FLOAT", .min = NODE_F(-9223372036854775807.0),
     .max = NODE_F(9223372036854775807.0)},
    NODE_INPUTS_END};
static const struct node_input_def bool_in[] = {{.name = "value", .type = "BOOLEAN"}, NODE_INPUTS_END};

static int prim_run(struct node_ctx *c)
{
    /* The declared input and output types are equal: pass the value through. */
    node_set_output(c, 0, value_ref(node_in_at(c, PRIM_VALUE)));
    return 0;
}

static const struct node_output_def string_out[] = {{.type = "STRING"}, NODE_OUTPUTS_END};
static const struct node_output_def int_out[] = {{.type = "INT"}, NODE_OUTPUTS_END};
static const struct node_output_def float_out[] = {{.type = "FLOAT"}, NODE_OUTPUTS_END};
static const struct node_output_def bool_out[] = {{.type = "BOOLEAN"}, NODE_OUTPUTS_END};

static const struct node_class prim_string = {
    .name = "PrimitiveString", .display_name = "String", .category = PRIM_CATEGORY,
    .python_module = PRIM_MODULE, .flags = NODE_CLASS_V3, .inputs = string_in,
    .n_inputs = PRIM_N, .outputs = string_out, .run = prim_run};
static const struct node_class prim_string_ml = {
    .name = "PrimitiveStringMultiline", .display_name = "String (Multiline)",
    .category = PRIM_CATEGORY, .python_module = PRIM_MODULE, .flags = NODE_CLASS_V3, .inputs = string_ml_in,
    .n_inputs = PRIM_N, .outputs = string_out, .run = prim_run};
static const struct node_class prim_int = {
    .name = "PrimitiveInt", .display_name = "Int", .category = PRIM_CATEGORY,
    .python_module = PRIM_MODULE, .flags = NODE_CLASS_V3, .inputs = int_in,
    .n_inputs = PRIM_N, .outputs = int_out, .run = prim_run};
static const struct node_class prim_float = {
    .name = "PrimitiveFloat", .display_name = "Float", .category = PRIM_CATEGORY,
    .python_module = PRIM_MODULE, .flags = NODE_CLASS_V3, .inputs = float_in,
    .n_inputs = PRIM_N, .outputs = float_out, .run = prim_run};
static const struct node_class prim_bool = {
    .name = "PrimitiveBoolean", .display_name = "Boolean", .category = PRIM_CATEGORY,
    .python_module = PRIM_MODULE, .flags = NODE_CLASS_V3, .inputs = bool_in,
    .n_inputs = PRIM_N, .outputs = bool_out, .run = prim_run};

static const struct node_class *const primitive_classes[] = {
    &prim_string, &prim_string_ml, &prim_int, &prim_float, &prim_bool};

void nodes_primitive_register(struct node_registry *r)
{
    node_registry_add_all(r, primitive_classes, sizeof(primitive_classes) / sizeof(primitive_classes[0]));
}
