/*
 * replay_main — runs a libFuzzer driver over its committed seed corpus, so that every
 * build (gcc included, no libFuzzer) replays the corpus in CTest and a crash once found
 * stays fixed.
 *
 * Usage: fuzz_replay_<name> DIR_OR_FILE...  Each directory is read non-recursively in
 * name order (dot files skipped). Every input goes through LLVMFuzzerTestOneInput
 * exactly as libFuzzer would hand it over: a private heap copy of exactly n bytes (so
 * that ASan builds catch reads past the end). Exits 1 when no input was found, since
 * an empty corpus would make the test pass without testing anything.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int n_run;

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open '%s'\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *data = malloc(cap);
    size_t k;
    while (data && (k = fread(data + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            data = realloc(data, cap *= 2);
    }
    fclose(f);
    if (!data) {
        fprintf(stderr, "out of memory reading '%s'\n", path);
        return -1;
    }
    /* Exactly n bytes, like libFuzzer's copy: a read past the end is a heap overflow. */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, data, n);
    free(data);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    printf("ok %d - %s (%zu bytes)\n", ++n_run, path, n);
    fflush(stdout);
    return 0;
}

static int replay_dir(const char *dir)
{
    struct dirent **list = NULL;
    int m = scandir(dir, &list, NULL, alphasort);
    if (m < 0) {
        fprintf(stderr, "cannot read '%s'\n", dir);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < m; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
        struct stat st;
        if (list[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            replay_file(path) < 0)
            rc = -1;
        free(list[i]);
    }
    free(list);
    return rc;
}

int main(int argc, char **argv)
{
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "cannot stat '%s'\n", argv[i]);
            rc = 1;
        } else if (S_ISDIR(st.st_mode) ? replay_dir(argv[i]) < 0 : replay_file(argv[i]) < 0) {
            rc = 1;
        }
    }
    if (n_run == 0) {
        fprintf(stderr, "no corpus inputs found\n");
        return 1;
    }
    printf("1..%d\n", n_run);
    return rc;
}
