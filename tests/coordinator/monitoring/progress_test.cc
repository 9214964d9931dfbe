// The progress line's arithmetic on an injected clock: a resumed run's rate counts only its own
// steps, the rate and the ETA leave out the first step's warm-up, the loss is the mean of the
// last 100 steps and says so.
#include "coordinator/monitoring/internal/progress.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"

namespace tessera::internal {
namespace {

// A Progress on the clock `*now`, printing into a scratch file (not a terminal).
struct Fixture {
  double now = 100;
  std::FILE* out = std::tmpfile();
  ~Fixture() { std::fclose(out); }
  Progress Make(int64_t first_step, int64_t total_steps) {
    return Progress("run", first_step, total_steps, [this] { return now; }, false, out);
  }
};

TEST_CASE("a resumed run's rate counts only its own steps") {
  Fixture f;
  Progress progress = f.Make(/*first_step=*/4000, /*total_steps=*/5000);
  CHECK(progress.Line(false) == "run: step 4000/5000");  // nothing completed: no figures yet
  f.now = 103;  // the first step, after a 3 s warm-up
  progress.Update(4001, 100, 0.5);
  CHECK(progress.Line(false) == "run: step 4001/5000  loss (last 1 steps) 0.5000");
  for (int64_t step = 4002; step <= 4100; ++step) {
    f.now += 0.01;  // 100 examples per 0.01 s: 10000 examples/s
    progress.Update(step, 100, 0.25);
  }
  // 99 steps in 0.99 s after the warm-up: 10000 examples/s (not the global step 4100 times the
  // batch over this run's time), and 900 steps left at 100 steps/s.
  const std::string line = progress.Line(false);
  CHECK_MESSAGE(absl::StrContains(line, "run: step 4100/5000  10000 examples/s"), line);
  CHECK_MESSAGE(absl::StrContains(line, "ETA 9 s"), line);
  // The final line: the whole run's rate (warm-up included) and time.
  progress.Finish();
  CHECK(progress.Line(true) ==
        "run: step 4100/5000  2506 examples/s  loss (last 100 steps) 0.2525  done in 4.0 s");
}

TEST_CASE("the ETA comes from the rate after the first step, not from the warm-up") {
  Fixture f;
  Progress progress = f.Make(0, 1000);
  f.now = 102;  // a 2 s first step
  progress.Update(1, 10, 1.0);
  f.now = 102.1;
  progress.Update(2, 10, 1.0);
  // One step in 0.1 s after the warm-up: 998 steps left take 99.8 s (from the mean over the
  // whole run, 2 steps in 2.1 s, it would say 1048 s).
  CHECK(absl::StrContains(progress.Line(false), "ETA 100 s"));
  CHECK(absl::StrContains(progress.Line(false), "100 examples/s"));
}

TEST_CASE("the loss is the mean of the last 100 steps") {
  Fixture f;
  Progress progress = f.Make(0, 1000);
  for (int64_t step = 1; step <= 150; ++step) {
    f.now += 0.01;
    progress.Update(step, 1, step <= 50 ? 10.0 : 1.0);  // the first 50 fall out of the window
  }
  CHECK(absl::StrContains(progress.Line(false), "loss (last 100 steps) 1.0000"));
  progress.Update(151, 1, 101.0);
  CHECK(absl::StrContains(progress.Line(false), "loss (last 100 steps) 2.0000"));
}

}  // namespace
}  // namespace tessera::internal
