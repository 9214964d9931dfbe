// Test support for actor tests: a deterministic actor system (CAF's testing scheduler, no
// threads) with a request helper, and small shard fixtures.
//
// CAF's own test DSL (caf/test/dsl.hpp) pulls in CAF's unit-test framework, which clashes with
// doctest, so this drives caf::scheduler::test_coordinator directly. A blocking receive
// (scoped_actor) would hang under it: requests go through a helper event-based actor instead.
//
// Spawned functions always take at least one argument besides `self`: CAF 0.17 dereferences a
// null argument tuple when there are none (UBSan reports it; caf/detail/init_fun_factory.hpp).
//
// Thread-safety: single-threaded by construction.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "actors/ps/shard_actor.h"
#include "core/ps/shard_op.h"
#include "core/ps/shard_state.h"

namespace tessera::testing {

inline caf::actor_system_config& DeterministicConfig(caf::actor_system_config& cfg) {
  RegisterTesseraTypes(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  return cfg;
}

// An actor system whose actors run only when the test says so (Run), one message at a time, in
// a deterministic order. Actors handed to Track are killed when the fixture ends, so a failing
// test still shuts the system down (CAF waits for every actor at shutdown).
class DeterministicSystem {
 public:
  DeterministicSystem()
      : system_(DeterministicConfig(config_)),
        scheduler_(dynamic_cast<caf::scheduler::test_coordinator&>(system_.scheduler())) {}

  ~DeterministicSystem() {
    for (const caf::actor_addr& actor : tracked_)
      caf::anon_send_exit(actor, caf::exit_reason::kill);
    Run();
  }

  caf::actor_system& system() { return system_; }

  // Runs every pending job until all mailboxes are empty; returns how many ran.
  size_t Run() { return scheduler_.run(); }

  // Moves the test clock forward by `by`, delivers the delayed messages (and timeouts) due by
  // then, and runs until idle; returns how many were due. Nothing ever waits for real time.
  size_t AdvanceTime(caf::timespan by) {
    const size_t due = scheduler_.advance_time(by);
    Run();
    return due;
  }

  template <class Handle>
  Handle Track(Handle actor) {
    tracked_.push_back(actor.address());
    return actor;
  }

  // Sends (xs...) to `dest` from a fresh helper actor, runs the system until idle, and returns
  // the reply (R) or the error reply as a Status. Internal if no reply came.
  template <class R, class Handle, class... Ts>
  absl::StatusOr<R> Ask(const Handle& dest, Ts... xs) {
    std::optional<absl::StatusOr<R>> out;
    system_.spawn(
        [&out, xs...](caf::event_based_actor* self, Handle to) {
          self->request(to, caf::infinite, xs...)
              .then([&out](R& reply) { out = std::move(reply); },
                    [&out](caf::error& err) { out = ErrorToStatus(err); });
        },
        dest);
    Run();
    if (!out.has_value()) return absl::InternalError("the request got no reply");
    return *std::move(out);
  }

  // Sends the shard op `op` to `shard` and returns its result (a ShardVersion's as its int64_t
  // version), or the error reply as a Status.
  template <class Op>
  auto AskOp(const shard_actor& shard, Op op) {
    using R = typename Op::Result;
    using Out = std::conditional_t<std::is_same_v<R, ShardVersion>, int64_t, R>;
    absl::StatusOr<ShardOpResult> reply = Ask<ShardOpResult>(shard, ShardOp(std::move(op)));
    if (!reply.ok()) return absl::StatusOr<Out>(reply.status());
    absl::StatusOr<R> result = ResultOf<Op>(*std::move(reply));
    if (!result.ok()) return absl::StatusOr<Out>(result.status());
    if constexpr (std::is_same_v<R, ShardVersion>) {
      return absl::StatusOr<Out>(result->version);
    } else {
      return absl::StatusOr<Out>(*std::move(result));
    }
  }

  // Ask for requests whose reply is empty (void).
  template <class Handle, class... Ts>
  absl::Status AskVoid(const Handle& dest, Ts... xs) {
    std::optional<absl::Status> out;
    system_.spawn(
        [&out, xs...](caf::event_based_actor* self, Handle to) {
          self->request(to, caf::infinite, xs...)
              .then([&out]() { out = absl::OkStatus(); },
                    [&out](caf::error& err) { out = ErrorToStatus(err); });
        },
        dest);
    Run();
    if (!out.has_value()) return absl::InternalError("the request got no reply");
    return *out;
  }

 private:
  caf::actor_system_config config_;  // must outlive system_
  caf::actor_system system_;
  caf::scheduler::test_coordinator& scheduler_;
  std::vector<caf::actor_addr> tracked_;
};

// Adagrad at learning rate 0.5: the shard tests' optimizer.
inline OptimizerSpec Adagrad() { return OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}; }

// `shape` filled with base, base + 0.125, base + 0.25, ... in row-major order.
inline Tensor Iota(Shape shape, float base) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = base + 0.125f * static_cast<float>(i);
  return t;
}

// Shard `index` of `num_shards` of a `rows` x `width` variable "emb" under a div layout, with
// values that depend on the global position only.
inline ShardSpec TestShardSpec(int32_t index, int32_t num_shards, int64_t rows, int64_t width,
                               std::optional<OptimizerSpec> optimizer = std::nullopt) {
  ShardSpec spec;
  spec.variable = "emb";
  spec.shard_index = index;
  spec.num_shards = num_shards;
  spec.full_shape = Shape{rows, width};
  const int64_t base = rows / num_shards, extra = rows % num_shards;
  spec.rows = base + (index < extra ? 1 : 0);
  spec.row_offset = index * base + std::min<int64_t>(index, extra);
  spec.initializer = InitializerSpec{"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 11};
  spec.optimizer = std::move(optimizer);
  return spec;
}

// Same shape and values; NaN equals NaN (IEEE results such as 0 / 0 must match too).
inline bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::equal(a.values().begin(), a.values().end(), b.values().begin(),
                    [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); });
}

}  // namespace tessera::testing
