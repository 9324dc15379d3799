// The modeled-drive keys of an "emu:" device string (drive, bw, wbw, iops, wiops, lat, lat99, wlat,
// wlat99, par, seed): collected in any order, then resolved onto the named profile, so
// "bw=3G,drive=pcie4" and "drive=pcie4,bw=3G" mean the same.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "host/emulator/drive_params.h"

namespace gpunvme::emu {

class DriveKeys {
 public:
  // Whether `key` is one of the drive keys. If it is and `value` is malformed, *error says why.
  bool take(std::string_view key, std::string_view value, std::string* error);
  // The profile (default "none") with the overrides applied; false with *error when they conflict.
  bool resolve(DriveParams* out, std::string* error) const;

  // For the parser's list of valid keys.
  static const char* help();

 private:
  std::optional<std::string> profile_;
  std::optional<double> bw_, wbw_, iops_, wiops_;
  std::optional<uint64_t> lat_, lat99_, wlat_, wlat99_, par_, seed_;
};

}  // namespace gpunvme::emu
