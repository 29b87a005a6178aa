/* error.c - the library's one error convention: every entry point returns an
 * mha_status, and mha_set_error leaves a message naming the bad value for
 * mha_last_error (per thread). Nothing else here: every other file calls in,
 * this one calls nothing back. */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"

static _Thread_local char errbuf[512];

mha_status mha_set_error(mha_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return st;
}

void mha_clear_error(void) {
    errbuf[0] = 0;
}

const char *mha_last_error(void) {
    return errbuf;
}

const char *mha_status_str(mha_status s) {
    switch (s) {
    case MHA_OK:
        return "ok";
    case MHA_EINVAL:
        return "invalid argument";
    case MHA_EUNSUPPORTED:
        return "not supported on this CPU";
    case MHA_ENOMEM:
        return "out of memory";
    case MHA_EIO:
        return "I/O error";
    case MHA_EFORMAT:
        return "malformed file";
    }
    return "unknown status";
}
