#include "coordinator/internal/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"

namespace tessera::internal {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Progress::OnTerminal() { return isatty(STDERR_FILENO) != 0; }

Progress::Progress(std::string label, int64_t total_steps, int64_t batch_size)
    : label_(std::move(label)),
      total_steps_(total_steps),
      batch_size_(batch_size),
      terminal_(OnTerminal()),
      start_(MonotonicSeconds()) {}

void Progress::Update(int64_t steps_done, double recent_loss) {
  const double now = MonotonicSeconds();
  const double every = terminal_ ? 0.2 : 5.0;
  if (last_print_ >= 0 && now - last_print_ < every) return;
  last_print_ = now;
  Print(steps_done, recent_loss, false);
}

void Progress::Note(const std::string& line) {
  if (terminal_) {
    std::fprintf(stderr, "\r%-100s\n", line.c_str());
    last_print_ = -1;  // redraw the progress line at the next update
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::Finish(int64_t steps_done, double recent_loss) {
  Print(steps_done, recent_loss, true);
}

void Progress::Print(int64_t steps_done, double recent_loss, bool final) {
  const double elapsed = std::max(MonotonicSeconds() - start_, 1e-9);
  const double rate = steps_done * batch_size_ / elapsed;
  const double eta = steps_done > 0 ? elapsed * (total_steps_ - steps_done) / steps_done : 0;
  const std::string line = absl::StrFormat(
      "%s: step %lld/%lld  %.0f examples/s  loss %.4f  %s", label_, steps_done, total_steps_, rate,
      recent_loss,
      final ? absl::StrFormat("done in %.1f s", elapsed) : absl::StrFormat("ETA %.0f s", eta));
  if (terminal_) {
    std::fprintf(stderr, "\r%-100s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace tessera::internal
