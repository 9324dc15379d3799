#include "host/emulator/generated.h"

#include <stdexcept>

namespace gpunvme::emu {
namespace {

// A function-local static: registration runs during static initialisation, in any order.
std::unique_ptr<Generator>& slot() {
  static std::unique_ptr<Generator> g;
  return g;
}

}  // namespace

bool register_generator(Generator g) {
  if (slot()) throw std::logic_error("emu: a second generator for emu:gen registered");
  slot() = std::make_unique<Generator>(std::move(g));
  return true;
}

const Generator* registered_generator() { return slot().get(); }

}  // namespace gpunvme::emu
