/*
 * nodes_string — ComfyUI's comfy_extras/nodes_string.py: the str nodes (nodes_string.c,
 * which says where Python's str semantics are only approximated) and the regex nodes
 * (nodes_string_regex.c, over py_re.h). nodes_string_register() and
 * nodes_string_regex_register() are declared in node_builtin.h.
 *
 * Threads: register before the registry is shared; nodes run on the executor.
 */
#ifndef LATENTD_NODES_NODES_STRING_H
#define LATENTD_NODES_NODES_STRING_H

#include "node_registry.h"

/* The classes, for tests that run a node directly. */
extern const struct node_class nodes_string_concatenate;
extern const struct node_class nodes_string_substring;
extern const struct node_class nodes_string_length;
extern const struct node_class nodes_case_converter;
extern const struct node_class nodes_string_trim;
extern const struct node_class nodes_string_replace;
extern const struct node_class nodes_string_contains;
extern const struct node_class nodes_string_compare;
extern const struct node_class nodes_regex_match;
extern const struct node_class nodes_regex_extract;
extern const struct node_class nodes_regex_replace;

#endif
