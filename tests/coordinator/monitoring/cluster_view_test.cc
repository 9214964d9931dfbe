// internal::ClusterView on the in-process cluster: the PS shards with their updates/s, taken off
// the request path, the last view kept once detached, and a cluster that can be destroyed while
// long-lived threads (a dashboard's) keep reading the view; a mirrored run's replicas.
#include "coordinator/monitoring/internal/cluster_view.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "cluster/base/cluster.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/ps/strategy.h"
#include "tessera/partitioner.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using internal::ClusterView;
using nlohmann::json;
using testing::ValueOrDie;

// The view's latest JSON once `ready` holds of it (failing after 20 s), waiting on the view
// thread's views.
template <class Ready>
json WaitForView(ClusterView& view, Ready ready) {
  json latest;
  REQUIRE_MESSAGE(view.AwaitView(ready, std::chrono::seconds(20), latest), latest.dump());
  return latest;
}

TEST_CASE("a cluster view lists the PS shards and their update rate, and outlives the cluster") {
  ClusterView view;
  CHECK(view.Json() == json::object());  // nothing attached yet
  // A reader that keeps reading the view from its own thread, before, during and after the
  // cluster's life, as a dashboard's threads do.
  std::atomic<bool> stop_reading{false};
  std::atomic<int64_t> reads{0};
  std::thread reader([&] {
    while (!stop_reading) {
      view.Json();
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  json first, second;
  {
    std::unique_ptr<Cluster> cluster =
        ValueOrDie(Cluster::StartInProcess({.num_ps = 2, .num_workers = 1}), "cluster");
    ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
    VariableOptions options;
    options.name = "emb";
    options.shape = Shape{10, 4};
    ShardedVariable emb = ValueOrDie(strategy.CreateVariable(options), "emb");
    view.Attach(cluster.get(), nullptr);
    first = WaitForView(view, [](const json& v) { return v.contains("ps"); });
    for (int i = 0; i < 10; ++i) {
      REQUIRE(emb.ScatterAdd({7, 1}, Tensor(Shape{2, 4}, 1.0f)).ok());
    }
    second = WaitForView(view, [](const json& v) {
      return v["ps"][1]["shards"][0]["updates"] == 10 &&
             v["ps"][1]["shards"][0].contains("updates_per_sec");
    });
    view.Detach();
  }  // the cluster goes while the reader still reads: this must not wait for it
  CHECK(reads > 0);

  REQUIRE(first["ps"].size() == 2);
  CHECK(first["ps"][0]["reachable"] == true);
  CHECK(first["ps"][0]["shards"][0]["name"] == "emb/part_0");
  CHECK(first["ps"][0]["shards"][0]["rows"] == 5);
  CHECK_FALSE(first["ps"][0]["shards"][0].contains("updates_per_sec"));  // one view: no rate yet
  const json& part_1 = second["ps"][1]["shards"][0];
  CHECK(part_1["name"] == "emb/part_1");
  CHECK(part_1["updates_per_sec"].get<double>() >= 0);
  CHECK(part_1["hottest_rows"][0] == json::array({7, 10}));
  // No coordinator was attached: no workers or closures, rather than made-up ones.
  CHECK_FALSE(second.contains("workers"));
  // Detached: the last view, kept.
  const json kept = view.Json();
  CHECK(kept["ps"][1]["shards"][0]["updates"] == 10);
  MetricRegistry registry;
  registry.AddCollector([&](MetricWriter& out) { view.Collect(out); });
  const std::string text = registry.PrometheusText();
  CHECK(text.find("tessera_ps_shard_updates_total{shard=\"emb/part_1\",ps=\"1\"} 10\n") !=
        std::string::npos);
  CHECK(text.find("tessera_ps_up{ps=\"0\"} 1\n") != std::string::npos);
  stop_reading = true;
  reader.join();
}

TEST_CASE("a mirrored run's view is its replicas, as worker slots, and their metrics") {
  ClusterView view;
  WorkerPoolStatus replicas;
  replicas.live_slots = {0, 2};
  replicas.worker_failures = 1;
  for (int32_t rank = 0; rank < 3; ++rank) {
    WorkerSlotStatus slot;
    slot.slot = rank;
    slot.live = rank != 1;
    slot.completed = 40;
    slot.failures = rank == 1 ? 1 : 0;
    slot.starts = 1;
    slot.last_function = "train_step";
    slot.last_step = 39;
    replicas.slots.push_back(slot);
  }
  view.ShowReplicas(replicas);
  const json shown = view.Json();
  CHECK(shown["strategy"] == "mirrored");
  CHECK(shown["ps"] == json::array());
  CHECK(shown["workers"]["live"] == 2);
  CHECK(shown["workers"]["failures"] == 1);
  REQUIRE(shown["workers"]["slots"].size() == 3);
  CHECK(shown["workers"]["slots"][1]["live"] == false);
  CHECK(shown["workers"]["slots"][2]["completed"] == 40);
  CHECK(shown["workers"]["slots"][2]["last_step"] == 39);
  MetricRegistry registry;
  registry.AddCollector([&](MetricWriter& out) { view.Collect(out); });
  const std::string text = registry.PrometheusText();
  CHECK(text.find("tessera_workers_live 2\n") != std::string::npos);
  CHECK(text.find("tessera_worker_failures_total 1\n") != std::string::npos);
}

}  // namespace
}  // namespace tessera
