#include "runtime/deploy/progress.h"

#include "host/text/human_bytes.h"

namespace gpunvme::deploy {

ProgressLine::ProgressLine(std::string label, bool enabled, FILE* out)
    : label_(std::move(label)), enabled_(enabled), out_(out), start_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { finish(); }

std::string rate_string(double bps) { return text::human_bytes(bps) + "/s"; }

std::string duration_string(double s) {
  if (s < 0 || s > 1e7) return "--:--";
  const auto t = uint64_t(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", (unsigned long long)(t / 3600),
                  (unsigned long long)(t / 60 % 60), (unsigned long long)(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llu:%02llu", (unsigned long long)(t / 60), (unsigned long long)(t % 60));
  }
  return buf;
}

void ProgressLine::update(uint64_t done, uint64_t total) {
  last_done_ = done;
  last_total_ = total;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(250) && done < total) return;
  last_draw_ = now;
  draw(done, total);
}

void ProgressLine::draw(uint64_t done, uint64_t total) {
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = sec > 0 ? double(done) / sec : 0;
  const double eta = rate > 0 ? double(total - std::min(done, total)) / rate : -1;
  std::fprintf(out_, "\r%s %s / %s  %3.0f%%  %s  ETA %s   ", label_.c_str(), text::human_bytes(double(done)).c_str(),
               text::human_bytes(double(total)).c_str(), total ? 100.0 * double(done) / double(total) : 100.0,
               rate_string(rate).c_str(), duration_string(eta).c_str());
  std::fflush(out_);
  drawn_ = true;
  drawn_done_ = done;
}

void ProgressLine::finish() {
  if (!enabled_ || !drawn_) return;
  if (drawn_done_ != last_done_) draw(last_done_, last_total_);
  std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = false;
  enabled_ = false;
}

}  // namespace gpunvme::deploy
