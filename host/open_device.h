// One device string for every tool: `emu:PATH[,key=value...]` (the built-in emulated controller)
// or `vfio:DOMAIN:BUS:DEV.FN` (a real controller bound to vfio-pci).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "host/controller.h"
#include "host/transport.h"

namespace gpunvme::host {

// Help text describing the accepted device strings, for --help-all output and error messages.
const char* device_string_help();
// The same in two lines, by example, for a tool's brief --help.
const char* device_string_brief();

// kReadOnly: for tools that only read (identify, ls, verify). emu: image files are opened
// read-only and never created or extended, so reading needs no write access and changes nothing.
enum class Access { kReadWrite, kReadOnly };

std::unique_ptr<Transport> open_transport(std::string_view device, Access access = Access::kReadWrite);

inline std::unique_ptr<Controller> open_controller(std::string_view device, const ControllerOptions& options = {},
                                                   Access access = Access::kReadWrite) {
  return std::make_unique<Controller>(open_transport(device, access), options);
}

}  // namespace gpunvme::host
