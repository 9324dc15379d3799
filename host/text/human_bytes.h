// Sizes for people: 1536 -> "1.50 KiB", 0 -> "0 B".
#pragma once
#include <string>

namespace gpunvme::text {

std::string human_bytes(double bytes);

}  // namespace gpunvme::text
