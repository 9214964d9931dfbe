#include "coordinator/monitoring/internal/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace tessera::internal {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Progress::OnTerminal() { return isatty(STDERR_FILENO) != 0; }

Progress::Progress(std::string label, int64_t first_step, int64_t total_steps,
                   std::function<double()> clock, bool terminal, std::FILE* out)
    : label_(std::move(label)),
      first_step_(first_step),
      total_steps_(total_steps),
      clock_(std::move(clock)),
      terminal_(terminal),
      out_(out),
      start_(clock_()),
      steps_done_(first_step) {}

// Note [Warm-up]
// The first step of a run takes the start-up: the workers' first requests open connections and
// fault in the shards' pages, the batches' first reads fill caches. Over a short run that one
// step dominates the mean, and an ETA from it is far off (a 0.7 s run showed "ETA 134 s" after
// its first step). So the rate and the ETA are measured from the moment the first step
// completed, over the steps after it; until a second step completes there is no rate to show.
void Progress::Update(int64_t steps_done, int64_t examples, double step_loss) {
  const double now = clock_();
  steps_done_ = steps_done;
  examples_ += examples;
  if (warm_ < 0) {
    warm_ = now;
    warm_steps_done_ = steps_done;
    warm_examples_ = examples_;
  }
  double& slot = losses_[losses_seen_ % kLossWindow];
  if (losses_seen_ >= kLossWindow) losses_sum_ -= slot;
  slot = step_loss;
  losses_sum_ += step_loss;
  ++losses_seen_;
  const double every = terminal_ ? 0.2 : 5.0;
  if (last_print_ >= 0 && now - last_print_ < every) return;
  last_print_ = now;
  Print(false);
}

void Progress::Note(const std::string& line) {
  if (terminal_) {
    std::fprintf(out_, "\r%-100s\n", line.c_str());
    last_print_ = -1;  // redraw the progress line at the next update
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::Finish() { Print(true); }

std::string Progress::Line(bool final) const {
  const double now = clock_();
  const double elapsed = std::max(now - start_, 1e-9);
  std::string rate = "";
  std::string eta = "";
  if (final) {
    rate = absl::StrFormat("  %.0f examples/s", examples_ / elapsed);
    eta = absl::StrFormat("  done in %.1f s", elapsed);
  } else if (warm_ >= 0 && steps_done_ > warm_steps_done_ && now > warm_) {
    const double seconds = now - warm_;
    rate = absl::StrFormat("  %.0f examples/s", (examples_ - warm_examples_) / seconds);
    const double steps_per_second = (steps_done_ - warm_steps_done_) / seconds;
    eta = absl::StrFormat("  ETA %.0f s",
                          std::max<int64_t>(0, total_steps_ - steps_done_) / steps_per_second);
  }
  std::string loss = "";
  if (losses_seen_ > 0) {
    const int64_t window = std::min<int64_t>(losses_seen_, kLossWindow);
    loss = absl::StrFormat("  loss (last %d steps) %.4f", window, losses_sum_ / window);
  }
  return absl::StrFormat("%s: step %d/%d%s%s%s", label_, steps_done_, total_steps_, rate, loss,
                         eta);
}

void Progress::Print(bool final) {
  const std::string line = Line(final);
  if (terminal_) {
    std::fprintf(out_, "\r%-100s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace tessera::internal
