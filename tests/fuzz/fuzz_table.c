/* fuzz_table.c - libFuzzer target for the tuning-table reader (variants/tables.c,
 * mha_table_load): JSON parsing through json-c, then the table's structure,
 * types and string fields. Beyond the sanitizers it checks that a failure says
 * why and that a loaded table's strings are terminated within their arrays. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"
#include "mha_private.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_string(const char *s, size_t cap) {
    if (!memchr(s, '\0', cap)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    mha_table t;
    char why[256];
    const mha_status st = mha_table_load(path, &t, why, sizeof why);
    if (st != MHA_OK) {
        if (!why[0] || t.entries || t.count) abort(); /* says why, holds nothing */
        return 0;
    }
    check_string(t.cpu_key, sizeof t.cpu_key);
    check_string(t.isa_active, sizeof t.isa_active);
    if (t.count < 0 || (t.count > 0 && !t.entries)) abort();
    for (int i = 0; i < t.count; i++) {
        const mha_table_entry *e = &t.entries[i];
        check_string(e->cls, sizeof e->cls);
        if (!e->winner.present) abort(); /* a null winner is rejected */
        check_string(e->winner.kernel, sizeof e->winner.kernel);
        check_string(e->runner_up.kernel, sizeof e->runner_up.kernel);
    }
    mha_table_free(&t);
    return 0;
}
