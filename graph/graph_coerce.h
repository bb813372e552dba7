/*
 * graph_coerce — Python's int()/float()/str()/bool() on JSON values, with Python's
 * error texts (validation quotes them). Private to graph/. Pure; any thread.
 */
#ifndef LATENTD_GRAPH_GRAPH_COERCE_H
#define LATENTD_GRAPH_GRAPH_COERCE_H

#include "graph_internal.h"

/* Python type name of a JSON value: "int", "float", "str", "bool", "NoneType",
 * "list", "dict". */
const char *gco_pytype(const cJSON *v);

/* int(v). 0 and *out (+ *big for values above INT64_MAX); *overflow = +1/-1 when
 * the (valid) integer is beyond 64 bits. -1 with Python's message in exc. */
int gco_to_int(const cJSON *v, int64_t *out, int *big, int *overflow, struct buf *exc);
/* float(v). 0 or -1 with Python's message in exc. */
int gco_to_float(const cJSON *v, double *out, struct buf *exc);
/* str(v), appended to out. */
void gco_to_str(const cJSON *v, struct buf *out);
/* bool(v). */
int gco_truthy(const cJSON *v);

#endif
