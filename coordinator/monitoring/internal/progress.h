// The progress line of a training loop: "\r"-rewritten when stderr is a terminal, a plain line
// every 5 s otherwise (logs), always ending with a "done in" line:
//   recsys: step 1200/1954  48211 examples/s  loss (last 100 steps) 0.6123  ETA 8 s
//   recsys: step 1954/1954  47120 examples/s  loss (last 100 steps) 0.6034  done in 20.9 s
//
// Every figure counts only this run's steps (a resumed run starts at its checkpoint's step, not
// at 0). The rate and the ETA leave out the time to the first completed step, which holds the
// start-up (connections, first reads, caches) rather than training (Note [Warm-up]); the final
// line's rate is the whole run's, as the summary's examples_per_sec.
//
// Thread-safety: not synchronized; one thread (the driver's).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace tessera::internal {

// Seconds on a monotonic clock (for durations only).
double MonotonicSeconds();

class Progress {
 public:
  // The loss the line shows: the mean of the last this many steps' losses.
  static constexpr int kLossWindow = 100;

  // The run trains global steps `first_step`..`total_steps`. `clock` (seconds, monotonic),
  // `terminal` (whether to rewrite one line) and `out` are the machine's unless a test sets them.
  Progress(std::string label, int64_t first_step, int64_t total_steps,
           std::function<double()> clock = MonotonicSeconds, bool terminal = OnTerminal(),
           std::FILE* out = stderr);

  // Global step `steps_done` completed, training on `examples` examples with loss `step_loss`.
  // Prints the line at most every 0.2 s on a terminal and every 5 s otherwise.
  void Update(int64_t steps_done, int64_t examples, double step_loss);
  // Prints `line` (a result in the middle of the run, e.g. a validation) on a line of its own,
  // above the progress line on a terminal.
  void Note(const std::string& line);
  // Prints the final line.
  void Finish();
  // The line as it would print now (final: the "done in" line), without "\r" or a newline.
  std::string Line(bool final) const;
  // Whether progress goes to a terminal (stderr).
  static bool OnTerminal();

 private:
  void Print(bool final);

  std::string label_;
  int64_t first_step_;
  int64_t total_steps_;
  std::function<double()> clock_;
  bool terminal_;
  std::FILE* out_;
  double start_;
  double last_print_ = -1;
  int64_t steps_done_;
  int64_t examples_ = 0;  // this run's
  // The first completed step (Note [Warm-up]): when, and the examples up to it.
  double warm_ = -1;
  int64_t warm_steps_done_ = 0;
  int64_t warm_examples_ = 0;
  // The last kLossWindow step losses, a ring.
  std::array<double, kLossWindow> losses_{};
  int64_t losses_seen_ = 0;
  double losses_sum_ = 0;
};

}  // namespace tessera::internal
