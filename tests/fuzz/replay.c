/* Replays inputs through a fuzz target's entry point in any build (no libFuzzer needed): every
 * file named, and every file in every directory named. A crash, a sanitizer report or an
 * abort fails the run, as it would fail the fuzzer. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (buf = malloc((size_t)len + 1)) == NULL) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        if (f != NULL)
            fclose(f);
        return 1;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "replay: short read of %s\n", path);
        fclose(f);
        free(buf);
        return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int failed = 0, n = 0;

    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        DIR *d;
        struct dirent *e;
        char path[4096];
        if (stat(argv[i], &st) != 0)
            continue; /* an empty corpus directory is not kept by git */
        if (!S_ISDIR(st.st_mode)) {
            failed |= replay_file(argv[i]), n++;
            continue;
        }
        if ((d = opendir(argv[i])) == NULL)
            return 1;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            failed |= replay_file(path), n++;
        }
        closedir(d);
    }
    printf("replayed %d input(s)\n", n);
    return failed;
}
