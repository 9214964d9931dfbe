// FanIn: joins n results that arrive in any order — the one fan-in join of Tessera (a shard
// operation over several shards, the values and gradients of a train step, a PS node's batch,
// statistics, checkpoints). CAF 0.17 has no select_all; this is it, apart from the transport.
//
//   auto join = FanIn<Tensor>::Start(shards.size(), [](absl::StatusOr<std::vector<Tensor>> all) {
//     ...  // every result in index order, or the first error
//   });
//   for (size_t k = 0; k < shards.size(); ++k) Send(..., join->Slot(k));
//
// `done` runs exactly once: with every result (indexed like the slots), as soon as the last one
// arrives, or with the first error, as soon as it arrives (later results are dropped). With n == 0
// it runs at once, from Start, with no results. A slot that reports twice is a bug (asserted).
//
// Thread-safety: none. A FanIn belongs to one actor: every slot must be called from it.
#pragma once

#include <cassert>
#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

template <class T>
class FanIn : public std::enable_shared_from_this<FanIn<T>> {
 public:
  using Done = std::function<void(absl::StatusOr<std::vector<T>>)>;

  static std::shared_ptr<FanIn> Start(size_t n, Done done) {
    std::shared_ptr<FanIn> join(new FanIn(n, std::move(done)));
    if (n == 0) join->Finish(std::vector<T>{});
    return join;
  }

  // Result `k` (< n) arrived.
  void Arrive(size_t k, absl::StatusOr<T> result) {
    if (finished_) return;
    if (!result.ok()) return Finish(result.status());
    assert(k < values_.size() && !arrived_[k]);
    arrived_[k] = true;
    values_[k] = *std::move(result);
    if (--pending_ == 0) Finish(std::move(values_));
  }

  // A callable delivering result `k`: what a request's reply handler gets.
  std::function<void(absl::StatusOr<T>)> Slot(size_t k) {
    return [join = this->shared_from_this(), k](absl::StatusOr<T> result) {
      join->Arrive(k, std::move(result));
    };
  }

  bool finished() const { return finished_; }

 private:
  FanIn(size_t n, Done done)
      : values_(n), arrived_(n, false), pending_(n), done_(std::move(done)) {}

  void Finish(absl::StatusOr<std::vector<T>> outcome) {
    finished_ = true;
    Done done = std::move(done_);  // `done` may drop the last reference to this join
    done(std::move(outcome));
  }

  std::vector<T> values_;
  std::vector<bool> arrived_;
  size_t pending_;
  bool finished_ = false;
  Done done_;
};

}  // namespace tessera
