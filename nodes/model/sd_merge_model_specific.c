/*
 * comfy_extras.nodes_model_merging_model_specific for the families latentd runs:
 * ModelMergeSD1 (also registered as ModelMergeSD2: SD1.x and SD2.x share the UNet's
 * blocks) and ModelMergeSDXL. Each is ModelMergeBlocks with one ratio per UNet block
 * (sd_merge.h): an input's name is the key prefix it rules ("input_blocks.4." for
 * SD1; SDXL's names have no trailing dot, "input_blocks.4", as in ComfyUI), the
 * longest matching one wins and keys no name prefixes take the first input's ratio
 * (time_embed.).
 *
 * Threads: executor thread.
 */
#include "node_registry.h"
#include "sd_merge.h"
#include "sd_nodes.h"

#define SPECIFIC_MODULE "comfy_extras.nodes_model_merging_model_specific"
#define SPECIFIC_CATEGORY "advanced/model_merging/model_specific"

#define R(n)                                                                                   \
    {.name = n, .type = "FLOAT", .def = NODE_F(1.0), .min = NODE_F(0.0), .max = NODE_F(1.0),   \
     .step = NODE_F(0.01)}
#define MODELS {.name = "model1", .type = "MODEL"}, {.name = "model2", .type = "MODEL"}

enum { SPECIFIC_FIRST_RATIO = 2 }; /* after model1, model2 */

/* The block names in input order (ComfyUI's arg_dict order), then the declarations. */
#define SD1_BLOCKS(X)                                                                          \
    X("time_embed."), X("label_emb."), X("input_blocks.0."), X("input_blocks.1."),             \
        X("input_blocks.2."), X("input_blocks.3."), X("input_blocks.4."), X("input_blocks.5."), \
        X("input_blocks.6."), X("input_blocks.7."), X("input_blocks.8."), X("input_blocks.9."), \
        X("input_blocks.10."), X("input_blocks.11."), X("middle_block.0."),                    \
        X("middle_block.1."), X("middle_block.2."), X("output_blocks.0."),                     \
        X("output_blocks.1."), X("output_blocks.2."), X("output_blocks.3."),                   \
        X("output_blocks.4."), X("output_blocks.5."), X("output_blocks.6."),                   \
        X("output_blocks.7."), X("output_blocks.8."), X("output_blocks.9."),                   \
        X("output_blocks.10."), X("output_blocks.11."), X("out.")
#define SDXL_BLOCKS(X)                                                                         \
    X("time_embed."), X("label_emb."), X("input_blocks.0"), X("input_blocks.1"),               \
        X("input_blocks.2"), X("input_blocks.3"), X("input_blocks.4"), X("input_blocks.5"),    \
        X("input_blocks.6"), X("input_blocks.7"), X("input_blocks.8"), X("middle_block.0"),    \
        X("middle_block.1"), X("middle_block.2"), X("output_blocks.0"), X("output_blocks.1"),  \
        X("output_blocks.2"), X("output_blocks.3"), X("output_blocks.4"),                      \
        X("output_blocks.5"), X("output_blocks.6"), X("output_blocks.7"),                      \
        X("output_blocks.8"), X("out.")
#define NAME(n) n

static const char *const sd1_names[] = {SD1_BLOCKS(NAME)};
static const char *const sdxl_names[] = {SDXL_BLOCKS(NAME)};
#define N_SD1 ((int)(sizeof sd1_names / sizeof sd1_names[0]))
#define N_SDXL ((int)(sizeof sdxl_names / sizeof sdxl_names[0]))

static const struct node_input_def sd1_in[] = {MODELS, SD1_BLOCKS(R), NODE_INPUTS_END};
static const struct node_input_def sdxl_in[] = {MODELS, SDXL_BLOCKS(R), NODE_INPUTS_END};
static const struct node_output_def model_out[] = {{.type = "MODEL"}, NODE_OUTPUTS_END};

static int sd1_run(struct node_ctx *c)
{
    return sd__model_merge_blocks(c, sd1_names, SPECIFIC_FIRST_RATIO, N_SD1);
}

static int sdxl_run(struct node_ctx *c)
{
    return sd__model_merge_blocks(c, sdxl_names, SPECIFIC_FIRST_RATIO, N_SDXL);
}

const struct node_class sd_model_merge_sd1 = {
    .name = "ModelMergeSD1", .category = SPECIFIC_CATEGORY, .python_module = SPECIFIC_MODULE,
    .inputs = sd1_in, .n_inputs = SPECIFIC_FIRST_RATIO + N_SD1, .outputs = model_out,
    .run = sd1_run};
const struct node_class sd_model_merge_sd2 = {
    .name = "ModelMergeSD2", .category = SPECIFIC_CATEGORY, .python_module = SPECIFIC_MODULE,
    .inputs = sd1_in, .n_inputs = SPECIFIC_FIRST_RATIO + N_SD1, .outputs = model_out,
    .run = sd1_run};
const struct node_class sd_model_merge_sdxl = {
    .name = "ModelMergeSDXL", .category = SPECIFIC_CATEGORY, .python_module = SPECIFIC_MODULE,
    .inputs = sdxl_in, .n_inputs = SPECIFIC_FIRST_RATIO + N_SDXL, .outputs = model_out,
    .run = sdxl_run};
