// The end of every tool's main, in one place: what it throws becomes an exit status and one message.
//
//   int main(int argc, char** argv) {
//     return cli::run_tool("nvme_perf", help(), [&] { return run(parse(argc, argv)); });
//   }
#pragma once
#include <functional>

#include "runtime/cli/args.h"

namespace gpunvme::cli {

// Runs `body` and returns its exit status; a UsageError is printed with the usage lines
// (print_usage_error) and gives 2, any other exception "TOOL: error: WHAT" and 1.
int run_tool(const char* tool, const Help& help, const std::function<int()>& body);

}  // namespace gpunvme::cli
