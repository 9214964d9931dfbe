// The progress line of a training loop: "\r"-rewritten when stderr is a terminal, a plain line
// every 5 s otherwise (logs), always ending with a "done in" line:
//   recsys: step 1200/1954  48211 examples/s  loss 0.6123  ETA 8 s
//
// Thread-safety: not synchronized; one thread (the driver's).
#pragma once

#include <cstdint>
#include <string>

namespace tessera::internal {

// Seconds on a monotonic clock (for durations only).
double MonotonicSeconds();

class Progress {
 public:
  // `total_steps` is the step the run ends at; the rate counts `batch_size` examples per step.
  Progress(std::string label, int64_t total_steps, int64_t batch_size);

  // Prints the line for `steps_done` steps (global steps), at most every 0.2 s on a terminal
  // and every 5 s otherwise.
  void Update(int64_t steps_done, double recent_loss);
  // Prints `line` (a result in the middle of the run, e.g. a validation) on a line of its own,
  // above the progress line on a terminal, to stderr like the progress.
  void Note(const std::string& line);
  // Prints the final line.
  void Finish(int64_t steps_done, double recent_loss);
  // Whether progress goes to a terminal (stderr).
  static bool OnTerminal();

 private:
  void Print(int64_t steps_done, double recent_loss, bool final);

  std::string label_;
  int64_t total_steps_;
  int64_t batch_size_;
  bool terminal_;
  double start_;
  double last_print_ = -1;
};

}  // namespace tessera::internal
