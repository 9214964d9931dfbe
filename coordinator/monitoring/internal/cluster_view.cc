#include "coordinator/monitoring/internal/cluster_view.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/cluster_status.h"
#include "coordinator/scheduling/cluster_coordinator.h"

namespace tessera::internal {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

json WorkersJson(const WorkerPoolStatus& pool) {
  json slots = json::array();
  for (const WorkerSlotStatus& slot : pool.slots) {
    slots.push_back({{"slot", slot.slot},
                     {"live", slot.live},
                     {"running", slot.running},
                     {"completed", slot.completed},
                     {"errors", slot.errors},
                     {"failures", slot.failures},
                     {"starts", slot.starts},
                     {"last_closure", slot.last_closure},
                     {"last_function", slot.last_function},
                     {"last_step", slot.last_step}});
  }
  return {{"live", pool.live_slots.size()},
          {"failures", pool.worker_failures},
          {"restarts", pool.worker_restarts},
          {"run_failed", pool.run_failed},
          {"slots", std::move(slots)}};
}

json ClosuresJson(const ClosureStats& stats) {
  return {{"scheduled", stats.scheduled}, {"completed", stats.completed},
          {"failed", stats.failed},       {"retried", stats.retried},
          {"cancelled", stats.cancelled}, {"queued", stats.queued},
          {"running", stats.running}};
}

json RecoveriesJson(const std::vector<PsRecovery>& recoveries) {
  json out = json::array();
  for (const PsRecovery& r : recoveries) {
    out.push_back({{"ps_task", r.ps_task},
                   {"node", r.node},
                   {"seconds", r.seconds},
                   {"checkpoint", r.checkpoint},
                   {"checkpoint_step", r.checkpoint_step},
                   {"lost_steps", r.lost_steps}});
  }
  return out;
}

}  // namespace

void ClusterView::Attach(Cluster* cluster, ClusterCoordinator* coordinator) {
  std::lock_guard<std::mutex> lock(mu_);
  cluster_ = cluster;
  coordinator_ = coordinator;
  changed_ = true;
  if (!thread_.joinable()) {
    stop_ = false;
    thread_ = std::thread([this] { Refresh(); });
  }
  wake_.notify_all();
}

void ClusterView::Detach() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    wake_.notify_all();
  }
  thread_.join();  // after a last view
  std::lock_guard<std::mutex> lock(mu_);
  cluster_ = nullptr;
  coordinator_ = nullptr;
}

void ClusterView::ShowReplicas(const WorkerPoolStatus& replicas) {
  json view = {{"strategy", "mirrored"}, {"ps", json::array()}, {"workers", WorkersJson(replicas)}};
  std::lock_guard<std::mutex> lock(mu_);
  last_ = std::move(view);
  viewed_.notify_all();
}

json ClusterView::Json() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

bool ClusterView::AwaitView(const std::function<bool(const json&)>& ready,
                            std::chrono::milliseconds limit, json& out) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool seen = viewed_.wait_for(lock, limit, [&] { return ready(last_); });
  out = last_;
  return seen;
}

void ClusterView::Refresh() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Cluster* cluster = cluster_;
    ClusterCoordinator* coordinator = coordinator_;
    const bool last = stop_;
    changed_ = false;
    lock.unlock();
    json view = Take(cluster, coordinator);  // Detach waits for this: the pointers stay valid
    lock.lock();
    last_ = std::move(view);
    viewed_.notify_all();
    if (last) return;
    wake_.wait_for(lock, kRefreshInterval, [this] { return stop_ || changed_; });
  }
}

json ClusterView::Take(Cluster* cluster, ClusterCoordinator* coordinator) {
  if (cluster == nullptr) return json::object();
  const Clock::time_point now = Clock::now();
  json view = json::object();
  json nodes = json::array();
  for (const PsNodeStatus& node :
       QueryPsStatus(*cluster, absl::FromChrono(kPsTimeout))) {
    json shards = json::array();
    for (const ShardInfo& shard : node.stats.shards) {
      json entry = {{"name", shard.name},
                    {"rows", shard.block_shape.rows()},
                    {"cols", shard.block_shape.row_size()},
                    {"bytes", shard.bytes},
                    {"version", shard.version},
                    {"updates", shard.updates},
                    {"rows_touched", shard.rows_touched}};
      json hottest = json::array();
      for (const HotRow& hot : shard.hottest_rows) hottest.push_back({hot.row, hot.updates});
      entry["hottest_rows"] = std::move(hottest);
      auto seen = versions_.find(shard.name);
      if (seen != versions_.end() && now > seen->second.second) {
        const double seconds = std::chrono::duration<double>(now - seen->second.second).count();
        entry["updates_per_sec"] = (shard.version - seen->second.first) / seconds;
      }
      versions_[shard.name] = {shard.version, now};
      shards.push_back(std::move(entry));
    }
    nodes.push_back({{"task", node.task},
                     {"address", node.address},
                     {"reachable", node.reachable},
                     {"error", node.error},
                     {"bytes", node.stats.bytes},
                     {"shards", std::move(shards)}});
  }
  view["ps"] = std::move(nodes);
  if (coordinator != nullptr) {
    view["workers"] = WorkersJson(coordinator->workers());
    view["closures"] = ClosuresJson(coordinator->stats());
    view["recoveries"] = RecoveriesJson(coordinator->recoveries());
  }
  return view;
}

void ClusterView::Collect(MetricWriter& out) {
  const json view = Json();
  if (view.contains("ps")) {
    for (const json& node : view["ps"]) {
      const std::string task = absl::StrCat(node["task"].get<int>());
      out.Gauge("tessera_ps_up", "Whether a PS node answered the last view.", {{"ps", task}},
                node["reachable"].get<bool>() ? 1 : 0);
    }
    const std::vector<std::pair<const char*, const char*>> gauges = {
        {"rows", "Rows of a shard."}, {"bytes", "Bytes a shard holds (values and slots)."},
        {"version", "Mutating operations a shard has applied."}};
    for (const auto& [field, help] : gauges) {
      for (const json& node : view["ps"]) {
        for (const json& shard : node["shards"]) {
          out.Gauge(absl::StrCat("tessera_ps_shard_", field), help,
                    {{"shard", shard["name"].get<std::string>()},
                     {"ps", absl::StrCat(node["task"].get<int>())}},
                    shard[field].get<double>());
        }
      }
    }
    for (const json& node : view["ps"]) {
      for (const json& shard : node["shards"]) {
        out.Counter("tessera_ps_shard_updates_total", "Updates a shard has applied.",
                    {{"shard", shard["name"].get<std::string>()},
                     {"ps", absl::StrCat(node["task"].get<int>())}},
                    shard["updates"].get<double>());
      }
    }
  }
  if (view.contains("workers")) {
    const json& workers = view["workers"];
    out.Gauge("tessera_workers_live", "Workers alive.", {}, workers["live"].get<double>());
    out.Counter("tessera_worker_failures_total", "Workers that died.", {},
                workers["failures"].get<double>());
    const std::vector<std::pair<const char*, const char*>> counters = {
        {"completed", "Closures a worker slot completed."},
        {"errors", "Closures a worker slot answered with an error."}};
    for (const auto& [field, help] : counters) {
      for (const json& slot : workers["slots"]) {
        out.Counter(absl::StrCat("tessera_worker_closures_", field, "_total"), help,
                    {{"worker", absl::StrCat(slot["slot"].get<int>())}},
                    slot[field].get<double>());
      }
    }
    for (const json& slot : workers["slots"]) {
      out.Gauge("tessera_worker_running", "Closures running on a worker slot.",
                {{"worker", absl::StrCat(slot["slot"].get<int>())}},
                slot["running"].get<double>());
    }
  }
  if (view.contains("closures")) {
    const json& closures = view["closures"];
    out.Gauge("tessera_closures_queued", "Closures waiting for a worker.", {},
              closures["queued"].get<double>());
    for (const char* field : {"scheduled", "completed", "retried", "failed"}) {
      out.Counter(absl::StrCat("tessera_closures_", field, "_total"),
                  absl::StrCat("Closures ", field, "."), {}, closures[field].get<double>());
    }
  }
}

}  // namespace tessera::internal
