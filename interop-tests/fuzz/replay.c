/*
 * Runs every file of the committed corpora through the fuzz targets, without
 * libFuzzer (make test-fuzz-corpora, plain cc with ASan/UBSan):
 *
 *   fuzz_replay CORPUS_DIR     (CORPUS_DIR/<target>/<file>, targets below)
 *
 * A broken invariant aborts; prints the count per target and fails when a
 * target has no input.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>

#include "fuzz.h"

static const struct {
    const char *name;
    int (*fn)(const uint8_t *, size_t);
} TARGETS[] = {
    {"options", fuzz_options},
    {"payload", fuzz_payload},
    {"envelope", fuzz_envelope},
    {"sql", fuzz_sql},
};

int main(int argc, char **argv) {
    size_t t, total = 0;
    int bad = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_replay CORPUS_DIR\n");
        return 2;
    }
    for (t = 0; t < sizeof TARGETS / sizeof TARGETS[0]; t++) {
        char dir[1024];
        DIR *d;
        struct dirent *e;
        size_t n = 0;
        snprintf(dir, sizeof dir, "%s/%s", argv[1], TARGETS[t].name);
        if (!(d = opendir(dir))) {
            fprintf(stderr, "fuzz_replay: no corpus %s\n", dir);
            bad = 1;
            continue;
        }
        while ((e = readdir(d)) != NULL) {
            char path[2048];
            FILE *f;
            uint8_t *buf;
            long len;
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (!(f = fopen(path, "rb"))) continue;
            fseek(f, 0, SEEK_END);
            len = ftell(f);
            fseek(f, 0, SEEK_SET);
            buf = malloc((size_t)len + 1);
            if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
                fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
                bad = 1;
            } else {
                if (getenv("FUZZ_REPLAY_VERBOSE")) fprintf(stderr, "%s\n", path);
                TARGETS[t].fn(buf, (size_t)len);
                n++;
            }
            free(buf);
            fclose(f);
        }
        closedir(d);
        printf("fuzz_replay: %-9s %zu inputs\n", TARGETS[t].name, n);
        if (n == 0) bad = 1;
        total += n;
    }
    printf("fuzz_replay: %zu inputs, no invariant broken\n", total);
    return bad;
}
