#include "runtime/doctor/doctor.h"

#include <cstdio>

#include "host/vfio/sysfs_pci.h"
#include "runtime/doctor/checks.h"

namespace gpunvme::doctor {
namespace {

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

const char* verdict_text(int status) {
  switch (status) {
    case kExitReady: return "ready";
    case kExitWarnings: return "ready with warnings";
    default: return "blocked";
  }
}

}  // namespace

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kOk: return "ok";
    case Severity::kInfo: return "info";
    case Severity::kWarn: return "warn";
    case Severity::kFail: return "fail";
  }
  return "?";
}

int Report::exit_status() const {
  bool warn = false;
  for (const auto& c : checks) {
    if (c.severity == Severity::kFail) return kExitBlocked;
    warn |= c.severity == Severity::kWarn;
  }
  return warn ? kExitWarnings : kExitReady;
}

const Check* Report::find(const std::string& id) const {
  for (const auto& c : checks)
    if (c.id == id) return &c;
  return nullptr;
}

Report run_checks(const Environment& env) {
  const Tree tree(env.root);
  Context c{tree, env, false, false, false, "", -1};
  Report r;
  r.checks.push_back(check_kernel(c));
  Check noiommu = check_noiommu(c);
  r.checks.push_back(check_iommu(c));
  r.checks.push_back(std::move(noiommu));
  r.checks.push_back(check_vfio_modules(c));
  r.checks.push_back(check_memlock(c));
  r.checks.push_back(check_hugepages(c));
  r.checks.push_back(check_nvme_list(c));
  if (!env.device.empty()) {
    std::string text = env.device;
    if (text.rfind("vfio:", 0) == 0) text = text.substr(5);
    const auto bdf = vfio::normalize_bdf(text);
    if (!bdf) {
      r.checks.push_back({"device", Severity::kFail, "'" + env.device + "' is not a PCI address",
                          "pass --device vfio:DOMAIN:BUS:DEV.FN, e.g. vfio:0000:0b:00.0", {}});
    } else {
      c.bdf = *bdf;
      Check dev = check_device(c);
      const bool present = dev.severity != Severity::kFail || !dev.facts.empty();
      r.checks.push_back(std::move(dev));
      if (present) {
        r.checks.push_back(check_vfio_driver(c));
        r.checks.push_back(check_iommu_group(c));
        r.checks.push_back(check_dev_vfio(c));
        r.checks.push_back(check_pcie_link(c));
        r.checks.push_back(check_numa(c));
      }
    }
  }
  r.checks.push_back(check_gpu(c));
  r.checks.push_back(check_gpu_bar_map(c));
  return r;
}

std::string render_text(const Report& report) {
  std::string o;
  int fails = 0, warns = 0;
  for (const auto& c : report.checks) {
    const char* tag = c.severity == Severity::kOk     ? "  ok "
                      : c.severity == Severity::kInfo ? " info"
                      : c.severity == Severity::kWarn ? " WARN"
                                                      : " FAIL";
    fails += c.severity == Severity::kFail;
    warns += c.severity == Severity::kWarn;
    char head[64];
    std::snprintf(head, sizeof head, "[%s] %-17s ", tag, c.id.c_str());
    o += head + c.summary + "\n";
    if (!c.fix.empty() && c.severity != Severity::kOk) o += std::string(26, ' ') + "fix: " + c.fix + "\n";
  }
  const int status = report.exit_status();
  o += "\nresult: " + std::string(verdict_text(status)) + " (" + std::to_string(fails) + " blocking, " +
       std::to_string(warns) + " warnings; exit status " + std::to_string(status) + ")\n";
  return o;
}

std::string render_json(const Report& report, const Environment& env) {
  const int status = report.exit_status();
  std::string o = "{\n  \"tool\": \"gpunvme doctor\",\n  \"format\": 1,\n  \"device\": " + json_quote(env.device) +
                  ",\n  \"result\": " + json_quote(verdict_text(status)) +
                  ",\n  \"exit_status\": " + std::to_string(status) + ",\n  \"checks\": [";
  for (size_t i = 0; i < report.checks.size(); ++i) {
    const Check& c = report.checks[i];
    o += std::string(i ? "," : "") + "\n    {\"id\": " + json_quote(c.id) + ", \"status\": " +
         json_quote(severity_name(c.severity)) + ", \"summary\": " + json_quote(c.summary) +
         ", \"fix\": " + json_quote(c.fix) + ", \"facts\": {";
    for (size_t f = 0; f < c.facts.size(); ++f)
      o += std::string(f ? ", " : "") + json_quote(c.facts[f].first) + ": " + json_quote(c.facts[f].second);
    o += "}}";
  }
  return o + "\n  ]\n}\n";
}

}  // namespace gpunvme::doctor
