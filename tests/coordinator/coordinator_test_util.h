// Test support for the coordinator integration tests, which run on the real in-process cluster
// (CAF's threaded scheduler): cluster start-up, bounded waits, tensor comparisons, and a
// Timekeeper actor that replica functions ask to hold them (a gate the test opens) or to wake
// them after a delay — so a test can kill a worker in the middle of a closure deterministically
// without any replica function blocking its worker's thread.
//
// Every wait here is bounded: a hang becomes a failed check, never a stuck test.
//
// Thread-safety: the helpers are called from the test's thread; the Timekeeper is an actor.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/base/error.h"
#include "actors/ps/shard_client.h"
#include "actors/ps/variable_ops.h"
#include "actors/scheduling/replica.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/ps/sharded_variable.h"
#include "core/scheduling/closure.h"
#include "tessera/tensor.h"
#include "tests/event_count.h"
#include "tests/status_util.h"

namespace tessera::testing {

// Generous upper bound for anything a test waits on; a healthy run takes milliseconds.
inline constexpr absl::Duration kWaitLimit = absl::Seconds(20);

// In process by default. With TESSERA_TEST_PS="host:port,host:port,..." (set by
// tests/e2e/networked_shard_ops.sh, which starts those `tessera ps` processes), a networked
// Cluster connected to the first `num_ps` of them instead: the same tests then run against
// shards in other processes, over the real wire format and handshake.
inline std::unique_ptr<Cluster> StartCluster(int32_t num_ps, int32_t num_workers) {
  if (const char* remote = std::getenv("TESSERA_TEST_PS"); remote != nullptr && *remote) {
    ClusterSpec spec;
    for (absl::string_view address : absl::StrSplit(remote, ',')) {
      absl::StatusOr<NodeAddress> parsed = ParseNodeAddress(address);
      REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
      spec.ps.push_back(*parsed);
    }
    REQUIRE(static_cast<int32_t>(spec.ps.size()) >= num_ps);
    spec.ps.resize(num_ps);
    spec.workers.assign(num_workers, NodeAddress{"127.0.0.1", 1});  // nobody joins
    spec.coordinator = NodeAddress{"127.0.0.1", 1};
    NetworkOptions network;
    network.connect_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Connect(spec, network);
    REQUIRE_MESSAGE(cluster.ok(), cluster.status().ToString());
    return *std::move(cluster);
  }
  ClusterOptions options;
  options.num_ps = num_ps;
  options.num_workers = num_workers;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::StartInProcess(options);
  REQUIRE_MESSAGE(cluster.ok(), cluster.status().ToString());
  return *std::move(cluster);
}

// Fetches every value with one overall deadline; the first error (or DeadlineExceeded) wins.
inline absl::StatusOr<std::vector<ClosureValues>> FetchAllWithin(
    const std::vector<RemoteValue>& values, absl::Duration limit = kWaitLimit) {
  const absl::Time deadline = absl::Now() + limit;
  std::vector<ClosureValues> out;
  for (const RemoteValue& value : values) {
    absl::StatusOr<ClosureValues> v = value.FetchWithin(deadline - absl::Now());
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return out;
}

// Runs `fn` on its own thread; when it has not returned within `limit` (a deadlock), reports
// `what` and ends the process: the stuck thread could never be joined, and a failing ctest entry
// beats a hanging one.
inline void RunWithin(absl::Duration limit, const std::string& what, std::function<void()> fn) {
  auto finished = std::make_shared<absl::Notification>();
  std::thread runner([fn = std::move(fn), finished] {
    fn();
    finished->Notify();
  });
  if (!finished->WaitForNotificationWithTimeout(limit)) {
    std::fprintf(stderr, "FATAL: %s did not finish within %s (deadlock?)\n", what.c_str(),
                 absl::FormatDuration(limit).c_str());
    std::fflush(stderr);
    std::_Exit(3);
  }
  runner.join();
}

// "[1, 2; 3, 4]" for error messages.
inline std::string Describe(const Tensor& t) {
  std::ostringstream out;
  out << t.shape().ToString() << " {";
  for (int64_t i = 0; i < t.size() && i < 64; ++i) out << (i ? ", " : "") << t.values()[i];
  if (t.size() > 64) out << ", ...";
  out << "}";
  return out.str();
}

// Same shape and every element within `tolerance` (exact by default).
inline bool SameTensor(const Tensor& got, const Tensor& want, float tolerance = 0.0f) {
  if (got.shape() != want.shape()) return false;
  for (int64_t i = 0; i < got.size(); ++i) {
    const float a = got.values()[i], b = want.values()[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::fabs(a - b) <= tolerance)) return false;
  }
  return true;
}

#define CHECK_TENSOR(got, want)                                        \
  CHECK_MESSAGE(::tessera::testing::SameTensor((got), (want)), "got ", \
                ::tessera::testing::Describe(got), "\nwant ", ::tessera::testing::Describe(want))
#define CHECK_TENSOR_NEAR(got, want, tol)                                     \
  CHECK_MESSAGE(::tessera::testing::SameTensor((got), (want), (tol)), "got ", \
                ::tessera::testing::Describe(got), "\nwant ", ::tessera::testing::Describe(want))

inline Tensor FromVector(Shape shape, std::vector<float> values) {
  return ValueOrDie(Tensor::FromVector(std::move(shape), std::move(values)), "FromVector");
}

// -- Timekeeper -------------------------------------------------------------------------------

using tk_wait_atom = caf::atom_constant<caf::atom("tk_wait")>;
using tk_open_atom = caf::atom_constant<caf::atom("tk_open")>;
using tk_sleep_atom = caf::atom_constant<caf::atom("tk_sleep")>;
using tk_wake_atom = caf::atom_constant<caf::atom("tk_wake")>;

struct TimekeeperState {
  static inline const char* name = "tessera.test.timekeeper";
  bool open = false;
  std::vector<caf::response_promise> held;
  std::map<int64_t, caf::response_promise> sleeping;
  int64_t next_sleeper = 0;
};

// (tk_wait) -> bool: answered once the gate opens (at once when it is open).
// (tk_open): opens the gate for good, answering every held wait.
// (tk_sleep, int32 ms) -> bool: answered after `ms` milliseconds.
inline caf::behavior TimekeeperActor(caf::stateful_actor<TimekeeperState>* self,
                                     std::shared_ptr<EventCount> waits) {
  return {
      [self, waits](tk_wait_atom) -> caf::result<bool> {
        waits->Add();
        if (self->state.open) return true;
        caf::response_promise promise = self->make_response_promise();
        self->state.held.push_back(promise);
        return promise;
      },
      [self](tk_open_atom) {
        self->state.open = true;
        for (caf::response_promise& promise : self->state.held) promise.deliver(true);
        self->state.held.clear();
      },
      [self](tk_sleep_atom, int32_t ms) -> caf::result<bool> {
        caf::response_promise promise = self->make_response_promise();
        const int64_t id = self->state.next_sleeper++;
        self->state.sleeping.emplace(id, promise);
        self->delayed_send(self, std::chrono::milliseconds(ms), tk_wake_atom::value, id);
        return promise;
      },
      [self](tk_wake_atom, int64_t id) {
        auto it = self->state.sleeping.find(id);
        if (it == self->state.sleeping.end()) return;
        it->second.deliver(true);
        self->state.sleeping.erase(it);
      },
  };
}

// Owns a Timekeeper actor; the destructor stops it (declare it after the cluster so it goes
// first: the actor system waits for every actor at shutdown).
class Timekeeper {
 public:
  explicit Timekeeper(caf::actor_system& system)
      : waits_(std::make_shared<EventCount>()), actor_(system.spawn(TimekeeperActor, waits_)) {}
  ~Timekeeper() { caf::anon_send_exit(actor_, caf::exit_reason::kill); }
  Timekeeper(const Timekeeper&) = delete;
  Timekeeper& operator=(const Timekeeper&) = delete;

  const caf::actor& actor() const { return actor_; }
  // How many waits have arrived so far (held or not).
  int waits() const { return static_cast<int>(waits_->count()); }
  // Whether `n` waits have arrived, waiting (up to kWaitLimit) for the timekeeper to count them.
  bool WaitForWaits(int n) { return waits_->AwaitAtLeast(n, kWaitLimit); }
  void Open() { caf::anon_send(actor_, tk_open_atom::value); }

 private:
  std::shared_ptr<EventCount> waits_;
  caf::actor actor_;
};

// The worker actor running `ctx`'s closure: its shard client's actor is the worker.
inline worker_actor::pointer WorkerOf(ReplicaContext& ctx) {
  return static_cast<worker_actor::pointer>(ctx.shards().self());
}

// From a replica function: `then` runs on the worker once timekeeper `tk`'s gate is open (or
// with the error when the timekeeper is gone). Capture the actor handle, never the Timekeeper
// object: a worker may outlive the test's locals by a few messages.
inline void AfterGate(ReplicaContext& ctx, const caf::actor& tk,
                      std::function<void(absl::Status)> then) {
  WorkerOf(ctx)
      ->request(tk, caf::infinite, tk_wait_atom::value)
      .then([then](bool) { then(absl::OkStatus()); },
            [then](caf::error& err) { then(ErrorToStatus(err)); });
}

// From a replica function: `then` runs on the worker after `ms` milliseconds.
inline void AfterSleep(ReplicaContext& ctx, const caf::actor& tk, int32_t ms,
                       std::function<void(absl::Status)> then) {
  WorkerOf(ctx)
      ->request(tk, caf::infinite, tk_sleep_atom::value, ms)
      .then([then](bool) { then(absl::OkStatus()); },
            [then](caf::error& err) { then(ErrorToStatus(err)); });
}

// Sets worker `slot`'s copy of the ON_READ variable `v` to `value` everywhere (what a closure on
// that worker would do).
inline void AssignCopy(Cluster& cluster, const ShardedVariable& v, int32_t slot, float value) {
  const absl::StatusOr<VariableHandle> copy = v.ForWorker(slot);
  REQUIRE_MESSAGE(copy.ok(), copy.status().ToString());
  const absl::Status s = internal::AwaitStatus(
      cluster.actors().system(), [copy = *copy, value](caf::event_based_actor* self, auto done) {
        ShardClient client(self);
        AssignAsync(client, copy, AssignKind::kAssign, Tensor(copy.shape, value), std::move(done));
      });
  REQUIRE_MESSAGE(s.ok(), s.ToString());
}

// Worker `slot`'s copy of the ON_READ variable `v`.
inline Tensor ReadCopy(Cluster& cluster, const ShardedVariable& v, int32_t slot) {
  absl::StatusOr<VariableHandle> copy = v.ForWorker(slot);
  REQUIRE_MESSAGE(copy.ok(), copy.status().ToString());
  const absl::StatusOr<Tensor> value =
      ShardedVariableAccess::Make(&cluster.actors().system(), *std::move(copy)).Read();
  REQUIRE_MESSAGE(value.ok(), value.status().ToString());
  return *value;
}

// The ShardInfo of each shard of `v` (ON_WRITE), in order.
inline std::vector<ShardInfo> ShardInfos(Cluster& cluster, const ShardedVariable& v) {
  std::vector<ShardInfo> out;
  const VariableHandle h = v.handle();
  for (int64_t s = 0; s < h.num_shards(); ++s) {
    absl::StatusOr<ShardInfo> info = internal::Await<ShardInfo>(
        cluster.actors().system(), [h, s](caf::event_based_actor* self, Done<ShardInfo> done) {
          ShardClient client(self);
          client.Call<InfoOp>(h, s, InfoOp{}, std::move(done));
        });
    REQUIRE_MESSAGE(info.ok(), info.status().ToString());
    out.push_back(*std::move(info));
  }
  return out;
}

}  // namespace tessera::testing
