/* The C API header compiled by a C compiler, alone (issue #11: it stays valid C). */
#include "runtime/capi/gpunvme.h"

#include <stddef.h>

typedef char extent_is_32_bytes[sizeof(gpunvme_extent_t) == 32 ? 1 : -1];

int main(void) { return gpunvme_strerror(GPUNVME_OK) != NULL ? 0 : 1; }
