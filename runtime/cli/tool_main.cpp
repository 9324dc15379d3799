#include "runtime/cli/tool_main.h"

#include <cstdio>
#include <exception>

namespace gpunvme::cli {

int run_tool(const char* tool, const Help& help, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    print_usage_error(tool, e, help);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace gpunvme::cli
