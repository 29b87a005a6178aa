/* error.h - the library's one error channel (kernels/error.c): a status and
 * this thread's message, which mha_last_error() returns. The lowest layer,
 * so every layer above (kernels/ itself, variants/) reports through it. */
#ifndef MHA_KERNELS_ERROR_H
#define MHA_KERNELS_ERROR_H

#include "mha.h"

/* Sets this thread's detailed error message and returns st. */
mha_status mha_set_error(mha_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mha_clear_error(void);

#endif
