#include "host/emulator/fault_spec.h"

#include <array>
#include <utility>
#include <vector>

#include "driver/commands.h"
#include "host/emulator/config.h"
#include "host/error.h"
#include "host/text/numbers.h"

namespace gpunvme::emu {
namespace {

constexpr std::array<std::pair<std::string_view, FaultKind>, 9> kKinds{{
    {"error", FaultKind::kErrorStatus},
    {"drop", FaultKind::kDropCompletion},
    {"delay", FaultKind::kDelayCompletion},
    {"wrong-cid", FaultKind::kWrongCid},
    {"cfs", FaultKind::kFatalOnCommand},
    {"removal", FaultKind::kSurpriseRemoval},
    {"fatal-at-enable", FaultKind::kFatalAtEnable},
    {"slow-ready", FaultKind::kSlowReady},
    {"never-ready", FaultKind::kNeverReady},
}};

bool is_enable_kind(FaultKind k) {
  return k == FaultKind::kFatalAtEnable || k == FaultKind::kSlowReady || k == FaultKind::kNeverReady;
}

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw Error(ErrorKind::kInvalidArgument,
              "fault=" + std::string(text) + ": " + why + " (form: " + fault_spec_help() + ")");
}

template <class Parse>
auto number(std::string_view text, std::string_view key, std::string_view value, Parse parse) {
  try {
    return parse(key, value);
  } catch (const text::ParseError& e) {
    bad(text, e.what());
  }
}

std::chrono::microseconds duration(std::string_view text, std::string_view key, std::string_view value) {
  uint64_t ns = 0;
  if (!parse_duration_ns(value, &ns))
    bad(text, std::string(key) + "=" + std::string(value) + " is not a duration (a number with ns, us, ms or s, e.g. 50ms)");
  return std::chrono::microseconds((ns + 999) / 1000);
}

int32_t queue(std::string_view text, std::string_view value) {
  if (value == "io") return kAnyIoQueue;
  if (value == "any") return kAnyQueue;
  if (value == "admin") return 0;
  const uint64_t q = number(text, "q", value, text::parse_u64);
  if (q > 65535) bad(text, "q=" + std::string(value) + " is not a queue id (0..65535, admin, io or any)");
  return int32_t(q);
}

int32_t opcode(std::string_view text, std::string_view value) {
  if (value == "read") return nvme::nvm_op::kRead;
  if (value == "write") return nvme::nvm_op::kWrite;
  if (value == "flush") return nvme::nvm_op::kFlush;
  if (value.empty() || value[0] < '0' || value[0] > '9')
    bad(text, "op=" + std::string(value) + " is not an opcode (read, write, flush or 0..0xff)");
  const uint64_t op = number(text, "op", value, text::parse_code);
  if (op > 0xFF) bad(text, "op=" + std::string(value) + " is not an opcode (read, write, flush or 0..0xff)");
  return int32_t(op);
}

uint8_t code(std::string_view text, std::string_view key, std::string_view value, uint64_t max) {
  const uint64_t v = number(text, key, value, text::parse_code);
  if (v > max) bad(text, std::string(key) + "=" + std::string(value) + " is larger than " + std::to_string(max));
  return uint8_t(v);
}

struct Seen {
  bool nth = false, times = false, by = false, status = false, xor_ = false, scope = false;
  bool op_name = false;  // op= given as read, write or flush, not as a code
};

void apply(std::string_view text, std::string_view key, std::string_view value, Fault* f, Seen* seen) {
  if (key == "q") {
    f->qid = queue(text, value);
    seen->scope = true;
  } else if (key == "op") {
    f->opcode = opcode(text, value);
    seen->scope = true;
    seen->op_name = value == "read" || value == "write" || value == "flush";
  } else if (key == "nth" || key == "every" || key == "times") {
    const uint64_t v = number(text, key, value, text::parse_u64);
    if (key != "times" && v == 0) bad(text, std::string(key) + "=0: counts start at 1");
    if (key == "nth") f->nth = v, seen->nth = true;
    if (key == "every") f->every = v;
    if (key == "times") f->times = v, seen->times = true;
  } else if (key == "at") {
    f->at = duration(text, key, value);
  } else if (key == "by") {
    f->delay = duration(text, key, value);
    if (f->delay.count() == 0) bad(text, "by=" + std::string(value) + " delays nothing (give a duration > 0)");
    seen->by = true;
  } else if (key == "sct" || key == "sc" || key == "dnr") {
    if (key == "sct") f->sct = code(text, key, value, 7);
    if (key == "sc") f->sc = code(text, key, value, 0xFF);
    if (key == "dnr") {
      if (value != "0" && value != "1") bad(text, "dnr=" + std::string(value) + " must be 0 or 1");
      f->dnr = value == "1";
    }
    seen->status = true;
  } else if (key == "xor") {
    const uint64_t v = number(text, key, value, text::parse_code);
    if (v == 0 || v > 0xFFFF) bad(text, "xor=" + std::string(value) + " must be 1..0xffff (0 would change nothing)");
    f->cid_xor = uint16_t(v);
    seen->xor_ = true;
  } else {
    bad(text, "unknown key \"" + std::string(key) + "\"");
  }
}

void check_keys_fit_kind(std::string_view text, const Fault& f, const Seen& seen) {
  const bool timed = f.kind == FaultKind::kDelayCompletion || f.kind == FaultKind::kSlowReady;
  if (timed && !seen.by) bad(text, "this fault needs by=DUR (how long)");
  if (!timed && seen.by) bad(text, "by= applies to delay and slow-ready only");
  if (seen.status && f.kind != FaultKind::kErrorStatus) bad(text, "sct=, sc= and dnr= apply to error only");
  if (seen.xor_ && f.kind != FaultKind::kWrongCid) bad(text, "xor= applies to wrong-cid only");
  if (seen.scope && is_enable_kind(f.kind)) bad(text, "q= and op= apply to command faults, not to enable faults");
  // read/write/flush name I/O commands; on the admin queue their codes are other commands (0x02 is Get
  // Log Page), so such a fault would fire on something else than it says, or never.
  const bool io_named = f.opcode == nvme::nvm_op::kRead || f.opcode == nvme::nvm_op::kWrite || f.opcode == nvme::nvm_op::kFlush;
  if (f.qid == 0 && io_named && seen.op_name)
    bad(text, "q=admin with op=read, write or flush never fires: those are I/O commands (give op=CODE for an admin opcode)");
}

}  // namespace

void check_fault_can_fire(std::string_view text, const Fault& f, uint32_t max_io_queues) {
  if (f.qid > 0 && uint32_t(f.qid) > max_io_queues)
    bad(text, "q=" + std::to_string(f.qid) + " never fires: the controller has I/O queues 1.." +
                  std::to_string(max_io_queues) + " (queues=" + std::to_string(max_io_queues) +
                  "); give a queue it has, or raise queues=");
}

const char* fault_spec_help() {
  return "fault=KIND[:KEY=VALUE]..., KIND error|drop|delay|wrong-cid|cfs|removal|fatal-at-enable|slow-ready|never-ready, "
         "KEY q=N|admin|io|any, op=read|write|flush|CODE, nth=N, every=N, times=N, at=DUR, sct=CODE, sc=CODE, "
         "dnr=0|1, by=DUR, xor=CODE; e.g. fault=error:sc=0x81:sct=2:every=5000, fault=drop:every=10000, "
         "fault=cfs:at=2s, fault=never-ready:nth=2";
}

Fault parse_fault_spec(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  Fault f;
  bool known = false;
  for (const auto& [name, k] : kKinds)
    if (name == kind) f.kind = k, known = true;
  if (!known) bad(text, "unknown fault kind \"" + std::string(kind) + "\"");
  if (!is_enable_kind(f.kind)) f.qid = kAnyIoQueue;
  Seen seen;
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (colon != std::string_view::npos && rest.empty()) bad(text, "empty option after ':'");
  std::vector<std::string_view> keys;
  while (!rest.empty()) {
    const size_t next = rest.find(':');
    const std::string_view item = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (next != std::string_view::npos && rest.empty()) bad(text, "trailing ':' (an empty option after the last)");
    const size_t eq = item.find('=');
    if (item.empty() || eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      bad(text, "option \"" + std::string(item) + "\" is not KEY=VALUE");
    const std::string_view key = item.substr(0, eq);
    for (std::string_view k : keys)
      if (k == key) bad(text, "key \"" + std::string(key) + "\" is given twice; give it once");
    keys.push_back(key);
    apply(text, key, item.substr(eq + 1), &f, &seen);
  }
  check_keys_fit_kind(text, f, seen);
  if (f.every != 0) {
    if (!seen.nth) f.nth = f.every;
    if (!seen.times) f.times = 0;
  }
  return f;
}

}  // namespace gpunvme::emu
