#include "actors/scheduling/fault_injector.h"

#include <algorithm>
#include <random>

namespace tessera {
namespace {

// Kills a busy worker if there is one, else any live worker, and restarts its slot after
// `restart_delay`. False (nothing done) when no worker lives.
bool KillOne(WorkerPoolControl& pool, std::mt19937_64& rng,
             std::chrono::milliseconds restart_delay) {
  std::vector<int32_t> slots = pool.BusySlots();
  if (slots.empty()) slots = pool.LiveSlots();
  if (slots.empty()) return false;
  const int32_t slot = slots[rng() % slots.size()];
  if (!pool.Kill(slot)) return false;
  pool.RestartAfter(slot, restart_delay);
  return true;
}

class CompletionKiller : public FaultInjector {
 public:
  CompletionKiller(int32_t failures, int64_t closures, uint64_t seed,
                   std::chrono::milliseconds restart_delay)
      : rng_(seed), restart_delay_(restart_delay) {
    // Away from both ends of the run, so the kills land while workers are busy.
    std::uniform_int_distribution<int64_t> at(closures / 10 + 1,
                                              std::max<int64_t>(closures * 9 / 10, 1));
    for (int32_t k = 0; k < failures; ++k) kill_at_.push_back(at(rng_));
    std::sort(kill_at_.rbegin(), kill_at_.rend());  // the next one at the back
  }

  void OnClosureCompleted(WorkerPoolControl& pool) override {
    ++completions_;
    while (!kill_at_.empty() && kill_at_.back() <= completions_) {
      kill_at_.pop_back();
      ++owed_;
    }
    KillOwed(pool);
  }

  void OnWorkerStarted(WorkerPoolControl& pool, int32_t) override { KillOwed(pool); }

 private:
  void KillOwed(WorkerPoolControl& pool) {
    while (owed_ > 0 && KillOne(pool, rng_, restart_delay_)) --owed_;
  }

  std::mt19937_64 rng_;
  std::chrono::milliseconds restart_delay_;
  std::vector<int64_t> kill_at_;  // completion counts, descending
  int64_t completions_ = 0;       // since the injector was installed
  int32_t owed_ = 0;              // kills due that found no worker alive
};

class PeriodicKiller : public FaultInjector {
 public:
  PeriodicKiller(std::chrono::milliseconds period, uint64_t seed,
                 std::chrono::milliseconds restart_delay)
      : period_(period), rng_(seed), restart_delay_(restart_delay) {}

  void OnInstalled(WorkerPoolControl& pool) override { OnWake(pool); }

  void OnWake(WorkerPoolControl& pool) override {
    KillOne(pool, rng_, restart_delay_);
    pool.WakeAfter(period_);
  }

 private:
  std::chrono::milliseconds period_;
  std::mt19937_64 rng_;
  std::chrono::milliseconds restart_delay_;
};

}  // namespace

std::shared_ptr<FaultInjector> KillBusyWorkersAtCompletions(
    int32_t failures, int64_t closures, uint64_t seed, std::chrono::milliseconds restart_delay) {
  return std::make_shared<CompletionKiller>(failures, closures, seed, restart_delay);
}

std::shared_ptr<FaultInjector> KillRandomWorkerEvery(std::chrono::milliseconds period,
                                                     uint64_t seed,
                                                     std::chrono::milliseconds restart_delay) {
  return std::make_shared<PeriodicKiller>(period, seed, restart_delay);
}

}  // namespace tessera
