// One device string for every tool: `emu:PATH[,key=value...]` (the built-in emulated controller)
// or `vfio:DOMAIN:BUS:DEV.FN` (a real controller bound to vfio-pci).
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "host/controller.h"
#include "host/transport.h"

namespace gpunvme::host {

// Help text describing the accepted device strings, for --help output and error messages.
const char* device_string_help();

std::unique_ptr<Transport> open_transport(std::string_view device);

inline std::unique_ptr<Controller> open_controller(std::string_view device, const ControllerOptions& options = {}) {
  return std::make_unique<Controller>(open_transport(device), options);
}

}  // namespace gpunvme::host
