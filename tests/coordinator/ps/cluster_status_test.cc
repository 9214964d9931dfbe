// QueryPsStatus on the real in-process cluster: every node's stats with the hottest rows of its
// shards, a killed PS reported unreachable without hiding the others, and the timeout bounding
// the whole query.
#include "coordinator/ps/cluster_status.h"

#include <doctest/doctest.h>

#include <caf/event_based_actor.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cluster/base/testing.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/ps/strategy.h"
#include "tessera/partitioner.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

std::unique_ptr<Cluster> StartTwoPs() {
  return ValueOrDie(Cluster::StartInProcess({.num_ps = 2, .num_workers = 1}), "cluster");
}

TEST_CASE("QueryPsStatus reports every PS node's shards, with their hottest rows") {
  std::unique_ptr<Cluster> cluster = StartTwoPs();
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  VariableOptions options;
  options.name = "emb";
  options.shape = Shape{10, 4};
  ShardedVariable emb = ValueOrDie(strategy.CreateVariable(options), "emb");
  // emb/part_0 (rows [0, 5)) on ps 0, emb/part_1 (rows [5, 10)) on ps 1.
  REQUIRE(emb.ScatterAdd({7, 7, 1, 9}, Tensor(Shape{4, 4}, 1.0f)).ok());

  const std::vector<PsNodeStatus> status = QueryPsStatus(*cluster, absl::Seconds(10));
  REQUIRE(status.size() == 2);
  for (int32_t task = 0; task < 2; ++task) {
    CAPTURE(task);
    CHECK(status[task].task == task);
    CHECK(status[task].address.empty());  // in process
    CHECK_MESSAGE(status[task].reachable, status[task].error);
    CHECK(status[task].stats.task == task);
    REQUIRE(status[task].stats.shards.size() == 1);
    CHECK(status[task].stats.bytes == 5 * 4 * 4);
  }
  const ShardInfo& part_0 = status[0].stats.shards[0];
  CHECK(part_0.name == "emb/part_0");
  CHECK(part_0.updates == 1);
  CHECK(part_0.rows_touched == 1);
  REQUIRE(part_0.hottest_rows.size() == 1);
  CHECK(part_0.hottest_rows[0].row == 1);
  const ShardInfo& part_1 = status[1].stats.shards[0];
  CHECK(part_1.name == "emb/part_1");
  CHECK(part_1.row_offset == 5);
  CHECK(part_1.rows_touched == 2);
  REQUIRE(part_1.hottest_rows.size() == 2);
  CHECK(part_1.hottest_rows[0].row == 7);  // global ids
  CHECK(part_1.hottest_rows[0].updates == 2);
  CHECK(part_1.hottest_rows[1].row == 9);
  CHECK(part_1.hottest_rows[1].updates == 1);
  CHECK(QueryPsStatus(*cluster, absl::Seconds(10), 1)[1].stats.shards[0].hottest_rows.size() == 1);
}

TEST_CASE("a killed PS is reported unreachable at once, the others as usual") {
  std::unique_ptr<Cluster> cluster = StartTwoPs();
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  VariableOptions options;
  options.name = "emb";
  options.shape = Shape{10, 4};
  ShardedVariable emb = ValueOrDie(strategy.CreateVariable(options), "emb");
  REQUIRE(testing::KillPs(*cluster, 1).ok());

  const absl::Duration timeout = absl::Seconds(10);
  const absl::Time start = absl::Now();
  const std::vector<PsNodeStatus> status = QueryPsStatus(*cluster, timeout);
  // A dead node answers with an error (or its down message) at once: no waiting out the timeout.
  CHECK(absl::Now() - start < absl::Seconds(5));
  REQUIRE(status.size() == 2);
  CHECK_MESSAGE(status[0].reachable, status[0].error);
  REQUIRE(status[0].stats.shards.size() == 1);
  CHECK(status[0].stats.shards[0].name == "emb/part_0");
  CHECK(!status[1].reachable);
  CHECK(status[1].task == 1);
  CHECK_MESSAGE(absl::StartsWith(status[1].error, "ps 1"), status[1].error);
  CHECK(status[1].stats.shards.empty());
}

// Holds a scheduler thread of `system` from construction until Release (or destruction, so a
// failed check never leaves the cluster unable to shut down): a blocking actor that waits on a
// latch the test opens, rather than sleeping for a guessed while.
class ThreadHolder {
 public:
  explicit ThreadHolder(caf::actor_system& system)
      : holding_(std::make_shared<absl::Notification>()),
        released_(std::make_shared<absl::Notification>()) {
    system.spawn([holding = holding_, released = released_](caf::event_based_actor*) {
      holding->Notify();
      released->WaitForNotification();
    });
  }
  ~ThreadHolder() { Release(); }
  ThreadHolder(const ThreadHolder&) = delete;
  ThreadHolder& operator=(const ThreadHolder&) = delete;

  // Whether the thread is held by now (waiting up to `limit` for the holder to start).
  bool Holding(absl::Duration limit) { return holding_->WaitForNotificationWithTimeout(limit); }
  void Release() {
    if (!released_->HasBeenNotified()) released_->Notify();
  }

 private:
  std::shared_ptr<absl::Notification> holding_;
  std::shared_ptr<absl::Notification> released_;
};

TEST_CASE("QueryPsStatus never waits longer than its timeout, even when no node can answer") {
  // One scheduler thread, held until the query is over: neither the nodes nor the query's own
  // actor can run.
  std::unique_ptr<Cluster> cluster =
      ValueOrDie(Cluster::StartInProcess({.num_ps = 2, .num_workers = 1, .threads = 1}), "cluster");
  ThreadHolder holder(cluster->actors().system());
  REQUIRE(holder.Holding(testing::kWaitLimit));
  const absl::Time start = absl::Now();
  const std::vector<PsNodeStatus> status = QueryPsStatus(*cluster, absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  CHECK(took >= absl::Milliseconds(300));
  CHECK(took < absl::Seconds(1));
  REQUIRE(status.size() == 2);
  for (const PsNodeStatus& ps : status) {
    CHECK(!ps.reachable);
    CHECK(ps.error == absl::StrCat("ps ", ps.task, " did not answer within 300ms"));
  }
  // Once the thread is free, the same cluster answers.
  holder.Release();
  for (const PsNodeStatus& ps : QueryPsStatus(*cluster, absl::Seconds(10))) {
    CHECK_MESSAGE(ps.reachable, ps.error);
  }
}

}  // namespace
}  // namespace tessera
