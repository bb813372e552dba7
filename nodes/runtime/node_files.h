/*
 * node_files — the files nodes read and list: model folders, input images, and
 * safe path resolution inside the input/output/temp folders.
 *
 * Listings are computed on every call (ComfyUI recomputes combo lists on each
 * /object_info and validation, so new files appear without a restart).
 *
 * Threads: any (only reads the file system).
 */
#ifndef LATENTD_NODES_NODE_FILES_H
#define LATENTD_NODES_NODE_FILES_H

#include <stddef.h>

#include "buf.h"
#include "node_registry.h"
#include "node_run.h"

/* Extensions ComfyUI lists for model folders (supported_pt_extensions). */
extern const char *const node_model_exts[];

/*
 * Append to `out` the files under <models_dir>/<folder> (recursive; relative paths
 * with '/'; only names ending in one of `exts`, or node_model_exts when NULL),
 * then the same under <output_dir>/<folder> for checkpoints, loras and vae as
 * ComfyUI does; sorted byte-wise, without duplicates. A missing folder lists
 * nothing.
 */
void node_files_list_models(const struct node_env *env, const char *folder,
                            const char *const *exts, struct node_strlist *out);

/* Find a model file by its listed name; fills `path` (reset first). Returns 0 or
 * ERR_NOT_FOUND. Names with "..", absolute paths or backslashes are not found. */
int node_files_find_model(const struct node_env *env, const char *folder, const char *name,
                          struct buf *path);

/* Append the regular files directly in the input folder whose names end in one of
 * `exts` (NULL-terminated; `nocase`: compared ignoring case), sorted byte-wise: the
 * combos of the nodes that load from the input folder. */
void node_files_list_input(const struct node_env *env, const char *const *exts, int nocase,
                           struct node_strlist *out);
/* Image files of the input folder (LoadImage's combo): node_files_list_input with
 * the image extensions PIL opens, in any case. */
void node_files_list_input_images(const struct node_env *env, struct node_strlist *out);
/* A combo validator's check for a file of the input folder: 0 when `value` resolves
 * (node_files_resolve_input), else that error with "Invalid <kind> file: <value>"
 * appended to `reason`, as ComfyUI's VALIDATE_INPUTS words it. */
int node_files_validate_input(const struct node_env *env, const char *value, const char *kind,
                              struct buf *reason);

/*
 * Resolve an annotated name as ComfyUI's folder_paths.get_annotated_filepath does:
 * "x.png" and "sub/x.png" are in the input folder, "x.png [output]" in output and
 * "x.png [temp]" in temp. Returns 0 and the path in `path`, ERR_DENIED when the
 * name escapes its folder, or ERR_NOT_FOUND when it is not a regular file.
 */
int node_files_resolve_input(const struct node_env *env, const char *name, struct buf *path);

/* mkdir -p. Returns 0 or ERR_IO. */
int node_files_mkdirs(const char *path);

/* Shared by the save nodes (SaveImage, SaveLatent): os.path.normpath for a relative
 * prefix, 0 or -1 when it climbs out of its folder; and the next "<filename>_<counter>_"
 * counter in `dir`, as folder_paths.get_save_image_path (comfy-api.md §8.1 step 4). */
int node_files_normalize_rel(const char *in, struct buf *out);
int node_files_next_counter(const char *dir, const char *filename);

/*
 * Where a save node writes (folder_paths.get_save_image_path, comfy-api.md §8.1):
 * `prefix` normalised inside the output folder and split into its subfolder and file
 * name, the folder created, and the next counter for the file name there. Strings are
 * never NULL after success. Returns 0, ERR_DENIED when the prefix climbs out of the
 * output folder (nothing is created), or ERR_IO when the folder cannot be made. Release
 * with node_save_path_release (also after a failure).
 */
struct node_save_path {
    struct buf dir;       /* <output_dir>[/<subfolder>] */
    struct buf subfolder; /* "" or "a/b" */
    struct buf filename;  /* the prefix's last part */
    int counter;          /* 1, 2, ... */
};
int node_files_save_path(const struct node_env *env, const char *prefix,
                         struct node_save_path *out);
void node_save_path_release(struct node_save_path *s);

/* IS_CHANGED of the load nodes (LoadImage, LoadLatent): the SHA-256 of the input file
 * `name` names, in hex. Returns 0 or the resolve/read error. */
int node_files_input_sha256_hex(const struct node_env *env, const char *name, struct buf *out);

#endif
