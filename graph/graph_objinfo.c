/*
 * /object_info: node declarations rendered in ComfyUI's shape (comfy-api.md
 * §3.6). Key order follows ComfyUI's node_info(); numbers print as Python does
 * (FLOAT options as 8.0, INT options exact to 64 bits through raw items).
 */
#include <string.h>

#include "alloc.h"
#include "graph_internal.h"

static cJSON *num_item(const struct node_num *n, int is_int)
{
    if (is_int)
        return gjson_int(n->i, n->big);
    return gjson_pyfloat(n->f);
}

static cJSON *combo_options(const struct node_env *env, const struct node_input_def *in)
{
    struct node_strlist l;
    node_strlist_init(&l);
    node_input_options(env, in, &l);
    cJSON *opts = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++)
        cJSON_AddItemToArray(opts, cJSON_CreateString(l.items[i]));
    node_strlist_release(&l);
    return opts;
}

/* V3 combos: ["COMBO", {"default": ..., "multiselect": false, "options": [...]}]. */
static cJSON *v3_combo_spec(const struct node_env *env, const struct node_input_def *in)
{
    cJSON *spec = cJSON_CreateArray();
    cJSON_AddItemToArray(spec, cJSON_CreateString(NODE_COMBO));
    cJSON *o = cJSON_CreateObject();
    if (in->tooltip)
        cJSON_AddStringToObject(o, "tooltip", in->tooltip);
    if (in->def_str)
        cJSON_AddStringToObject(o, "default", in->def_str);
    cJSON_AddFalseToObject(o, "multiselect");
    cJSON_AddItemToObject(o, "options", combo_options(env, in));
    cJSON_AddItemToArray(spec, o);
    return spec;
}

cJSON *gobj_input_spec(const struct node_env *env, const struct node_input_def *in,
                       int always_opts)
{
    cJSON *spec = cJSON_CreateArray();
    int is_combo = strcmp(in->type, NODE_COMBO) == 0;
    if (is_combo && in->remote_route) {
        cJSON_AddItemToArray(spec, cJSON_CreateString(NODE_COMBO));
    } else if (is_combo) {
        cJSON_AddItemToArray(spec, combo_options(env, in));
    } else {
        cJSON_AddItemToArray(spec, cJSON_CreateString(in->type));
    }
    int is_int = strcmp(in->type, "INT") == 0;
    cJSON *o = cJSON_CreateObject();
    if (in->def.set)
        cJSON_AddItemToObject(o, "default", num_item(&in->def, is_int));
    else if (in->def_str)
        cJSON_AddStringToObject(o, "default", in->def_str);
    else if (in->has_def_bool)
        cJSON_AddBoolToObject(o, "default", in->def_bool);
    if (in->min.set)
        cJSON_AddItemToObject(o, "min", num_item(&in->min, is_int));
    if (in->max.set)
        cJSON_AddItemToObject(o, "max", num_item(&in->max, is_int));
    if (in->step.set)
        cJSON_AddItemToObject(o, "step", num_item(&in->step, is_int));
    if (in->round.set)
        cJSON_AddItemToObject(o, "round", num_item(&in->round, is_int));
    else if (in->round_false)
        cJSON_AddFalseToObject(o, "round");
    if (in->multiline)
        cJSON_AddTrueToObject(o, "multiline");
    if (in->dynamic_prompts)
        cJSON_AddTrueToObject(o, "dynamicPrompts");
    if (in->control_after_generate)
        cJSON_AddTrueToObject(o, "control_after_generate");
    if (in->image_upload)
        cJSON_AddTrueToObject(o, "image_upload");
    if (in->image_folder)
        cJSON_AddStringToObject(o, "image_folder", in->image_folder);
    if (in->remote_route) {
        cJSON *remote = cJSON_AddObjectToObject(o, "remote");
        cJSON_AddStringToObject(remote, "route", in->remote_route);
        cJSON_AddTrueToObject(remote, "refresh_button");
        cJSON_AddStringToObject(remote, "control_after_refresh", "first");
    }
    if (in->force_input)
        cJSON_AddTrueToObject(o, "forceInput");
    if (in->advanced)
        cJSON_AddTrueToObject(o, "advanced");
    if (in->display)
        cJSON_AddStringToObject(o, "display", in->display);
    if (in->tooltip)
        cJSON_AddStringToObject(o, "tooltip", in->tooltip);
    if (always_opts || o->child)
        cJSON_AddItemToArray(spec, o);
    else
        cJSON_Delete(o);
    return spec;
}

/* A V3 input: always an options object, and a String states multiline even when false
 * (comfy_api's String.Input.as_dict). */
static cJSON *v3_input_spec(const struct node_env *env, const struct node_input_def *in)
{
    cJSON *spec = gobj_input_spec(env, in, 1);
    if (!strcmp(in->type, "STRING") && !in->multiline)
        cJSON_AddFalseToObject(cJSON_GetArrayItem(spec, 1), "multiline");
    return spec;
}

static const char *group_name(enum node_input_group g)
{
    return g == NODE_INPUT_OPTIONAL ? "optional" : g == NODE_INPUT_HIDDEN ? "hidden" : "required";
}

/* The rest of a V3 node's entry, in asdict(NodeInfoV1)'s order. */
static cJSON *v3_node_info_tail(cJSON *info, const struct node_class *cls)
{
    cJSON *tips = cJSON_AddArrayToObject(info, "output_tooltips");
    for (int i = 0; cls->outputs && cls->outputs[i].type; i++)
        cJSON_AddItemToArray(tips, cls->outputs[i].tooltip ? cJSON_CreateString(cls->outputs[i].tooltip)
                                                            : cJSON_CreateNull());
    cJSON_AddStringToObject(info, "name", cls->name);
    if (cls->display_name)
        cJSON_AddStringToObject(info, "display_name", cls->display_name);
    else
        cJSON_AddNullToObject(info, "display_name");
    cJSON_AddStringToObject(info, "description", cls->description ? cls->description : "");
    cJSON_AddStringToObject(info, "python_module", cls->python_module ? cls->python_module : "nodes");
    cJSON_AddStringToObject(info, "category", cls->category ? cls->category : "sd");
    cJSON_AddBoolToObject(info, "output_node", node_class_is_output(cls));
    cJSON_AddBoolToObject(info, "deprecated", (cls->flags & NODE_CLASS_DEPRECATED) != 0);
    cJSON_AddBoolToObject(info, "experimental", (cls->flags & NODE_CLASS_EXPERIMENTAL) != 0);
    cJSON_AddFalseToObject(info, "api_node");
    return info;
}

cJSON *gobj_node_info(const struct node_env *env, const struct node_class *cls)
{
    int v3 = (cls->flags & NODE_CLASS_V3) != 0;
    cJSON *info = cJSON_CreateObject();
    cJSON *input = cJSON_AddObjectToObject(info, "input");
    cJSON *order = cJSON_AddObjectToObject(info, "input_order");
    for (int g = NODE_INPUT_REQUIRED; g <= NODE_INPUT_HIDDEN; g++) {
        cJSON *grp = NULL, *ord = NULL;
        for (int i = 0; cls->inputs && cls->inputs[i].name; i++) {
            const struct node_input_def *in = &cls->inputs[i];
            if ((int)in->group != g)
                continue;
            if (!grp) {
                grp = cJSON_AddObjectToObject(input, group_name(g));
                ord = cJSON_AddArrayToObject(order, group_name(g));
            }
            if (g == NODE_INPUT_HIDDEN)
                cJSON_AddStringToObject(grp, in->name, in->type);
            else if (v3 && !strcmp(in->type, NODE_COMBO))
                cJSON_AddItemToObject(grp, in->name, v3_combo_spec(env, in));
            else if (v3)
                cJSON_AddItemToObject(grp, in->name, v3_input_spec(env, in));
            else
                cJSON_AddItemToObject(grp, in->name, gobj_input_spec(env, in, in->empty_opts));
            cJSON_AddItemToArray(ord, cJSON_CreateString(in->name));
        }
    }
    /* A V1 node without inputs still returns {"required": {}} from INPUT_TYPES. */
    if (!input->child) {
        cJSON_AddObjectToObject(input, "required");
        cJSON_AddArrayToObject(order, "required");
    }
    cJSON *out = cJSON_AddArrayToObject(info, "output");
    cJSON *is_list = cJSON_AddArrayToObject(info, "output_is_list");
    cJSON *names = cJSON_AddArrayToObject(info, "output_name");
    int any_tip = 0;
    for (int i = 0; cls->outputs && cls->outputs[i].type; i++) {
        const struct node_output_def *o = &cls->outputs[i];
        cJSON_AddItemToArray(out, cJSON_CreateString(o->type));
        cJSON_AddItemToArray(is_list, cJSON_CreateBool(o->is_list));
        cJSON_AddItemToArray(names, cJSON_CreateString(o->name ? o->name : o->type));
        any_tip |= o->tooltip != NULL;
    }
    if (v3)
        return v3_node_info_tail(info, cls);
    cJSON_AddStringToObject(info, "name", cls->name);
    cJSON_AddStringToObject(info, "display_name", cls->display_name ? cls->display_name : cls->name);
    cJSON_AddStringToObject(info, "description", cls->description ? cls->description : "");
    cJSON_AddStringToObject(info, "python_module", cls->python_module ? cls->python_module : "nodes");
    cJSON_AddStringToObject(info, "category", cls->category ? cls->category : "");
    cJSON_AddBoolToObject(info, "output_node", node_class_is_output(cls));
    if (any_tip) {
        cJSON *tips = cJSON_AddArrayToObject(info, "output_tooltips");
        for (int i = 0; cls->outputs[i].type; i++)
            cJSON_AddItemToArray(tips, cJSON_CreateString(cls->outputs[i].tooltip ? cls->outputs[i].tooltip : ""));
    }
    if (cls->flags & NODE_CLASS_DEPRECATED)
        cJSON_AddTrueToObject(info, "deprecated");
    if (cls->flags & NODE_CLASS_EXPERIMENTAL)
        cJSON_AddTrueToObject(info, "experimental");
    return info;
}

char *graph_object_info_json(struct graph_ctx *g, const char *class_name)
{
    cJSON *root = cJSON_CreateObject();
    if (class_name) {
        const struct node_class *cls = node_registry_find(g->reg, class_name);
        if (cls)
            cJSON_AddItemToObject(root, cls->name, gobj_node_info(&g->env, cls));
    } else {
        size_t n = node_registry_count(g->reg);
        for (size_t i = 0; i < n; i++) {
            const struct node_class *cls = node_registry_at(g->reg, i);
            cJSON_AddItemToObject(root, cls->name, gobj_node_info(&g->env, cls));
        }
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char *r = xstrdup(s ? s : "{}");
    cJSON_free(s);
    return r;
}
