// Named drive profiles for `drive=NAME` in an "emu:" device string. The values and their sources are
// in docs/drives.md; keep the two in step.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "host/emulator/drive_params.h"

namespace gpunvme::emu {

// The profile called `name`, or nullopt. "none" is the empty profile (nothing limited).
std::optional<DriveParams> drive_profile(std::string_view name);

// "sn530|pcie4|pcie5|none": the valid names, for error messages and help text.
const char* drive_profile_names();

}  // namespace gpunvme::emu
