/* CHECK / OK for the C API tests (plain C): count checks, report a failure with the C API's last
 * error message, go on. */
#ifndef GPUNVME_TESTS_CAPI_CHECK_H
#define GPUNVME_TESTS_CAPI_CHECK_H
#include <stdio.h>

#include "gpunvme.h"

static int checks = 0, failures = 0;
#define CHECK(cond)                                                                           \
  do {                                                                                        \
    ++checks;                                                                                 \
    if (!(cond)) {                                                                            \
      ++failures;                                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              gpunvme_last_error_message());                                                  \
    }                                                                                         \
  } while (0)
#define OK(call) CHECK((call) == GPUNVME_OK)

#endif
