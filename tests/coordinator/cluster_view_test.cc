// internal::ClusterView on the in-process cluster: the PS shards with their updates/s, the last
// view kept once detached, and a cluster that can still be destroyed after a long-lived thread
// (a dashboard's) has taken views of it.
#include "coordinator/internal/cluster_view.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "cluster/cluster.h"
#include "coordinator/sharded_variable.h"
#include "coordinator/strategy.h"
#include "core/partitioner.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using internal::ClusterView;
using nlohmann::json;
using testing::ValueOrDie;

TEST_CASE("a cluster view lists the PS shards and their update rate, and outlives the cluster") {
  ClusterView view;
  CHECK(view.Json() == json::object());  // nothing attached yet
  std::atomic<bool> release{false};
  json first, second;
  // Views taken from a thread that lives on after the cluster is gone, as a dashboard's do.
  std::thread dashboard_thread;
  {
    std::unique_ptr<Cluster> cluster =
        ValueOrDie(Cluster::StartInProcess({.num_ps = 2, .num_workers = 1}), "cluster");
    ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
    VariableOptions options;
    options.name = "emb";
    options.shape = Shape{10, 4};
    ShardedVariable emb = ValueOrDie(strategy.CreateVariable(options), "emb");
    view.Attach(cluster.get(), nullptr);
    std::atomic<int> stage{0};
    dashboard_thread = std::thread([&] {
      first = view.Json();
      stage = 1;
      while (stage != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      second = view.Json();
      stage = 3;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (stage != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 0; i < 10; ++i) {
      REQUIRE(emb.ScatterAdd({7, 1}, Tensor(Shape{2, 4}, 1.0f)).ok());
    }
    std::this_thread::sleep_for(ClusterView::kMinInterval + std::chrono::milliseconds(50));
    stage = 2;
    while (stage != 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    view.Detach();
  }  // the cluster goes while dashboard_thread still lives: this must not wait for it

  REQUIRE(first["ps"].size() == 2);
  CHECK(first["ps"][0]["reachable"] == true);
  CHECK(first["ps"][0]["shards"][0]["name"] == "emb/part_0");
  CHECK(first["ps"][0]["shards"][0]["rows"] == 5);
  CHECK_FALSE(first["ps"][0]["shards"][0].contains("updates_per_sec"));  // one view: no rate yet
  const json& part_1 = second["ps"][1]["shards"][0];
  CHECK(part_1["name"] == "emb/part_1");
  CHECK(part_1["updates"] == 10);
  CHECK(part_1["updates_per_sec"].get<double>() > 0);
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
  release = true;
  dashboard_thread.join();
}

}  // namespace
}  // namespace tessera
