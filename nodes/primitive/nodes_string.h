/*
 * nodes_string — ComfyUI's comfy_extras/nodes_string.py without the regex nodes
 * (nodes_string.c says why, and where Python's str semantics are only
 * approximated). nodes_string_register() is declared in node_builtin.h.
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

#endif
