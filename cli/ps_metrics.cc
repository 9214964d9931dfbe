#include "cli/ps_metrics.h"

#include <algorithm>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "cluster/network/port_check.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "tessera/status.h"

namespace tessera::cli {
namespace {

// Asks `node` for its stats, waiting at most `wait` (Note [A scrape waits for the node,
// boundedly]).
absl::StatusOr<PsNodeStats> AskStats(caf::actor_system& system, const ps_node_actor& node,
                                     absl::Duration wait) {
  caf::scoped_actor self(system);
  absl::StatusOr<PsNodeStats> out = absl::UnavailableError("the ps node did not answer");
  self->request(node, std::chrono::microseconds(absl::ToInt64Microseconds(wait)),
                stats_atom::value, int32_t{0})
      .receive([&](PsNodeStats& stats) { out = std::move(stats); },
               [&](caf::error& err) { out = ErrorToStatus(err); });
  return out;
}

void WriteStats(const PsNodeStats& stats, MetricWriter& out) {
  out.Gauge("tessera_ps_shards", "Shards this PS node holds.", {},
            static_cast<double>(stats.num_shards));
  out.Gauge("tessera_ps_bytes", "Bytes of the shards' blocks and optimizer slots.", {},
            static_cast<double>(stats.bytes));
  // One family at a time (the writer gives each name its HELP and TYPE once, before its run of
  // samples).
  const auto per_shard = [&](const char* name, const char* help, bool counter, auto value) {
    for (const ShardInfo& info : stats.shards) {
      auto [variable, shard] = VariableAndShard(info.name);
      const std::vector<std::pair<std::string, std::string>> labels = {
          {"variable", std::move(variable)}, {"shard", std::move(shard)}};
      const double v = static_cast<double>(value(info));
      if (counter) {
        out.Counter(name, help, labels, v);
      } else {
        out.Gauge(name, help, labels, v);
      }
    }
  };
  per_shard("tessera_ps_shard_rows", "Rows of the shard's block.", false,
            [](const ShardInfo& i) { return i.block_shape.rank() == 0 ? 1 : i.block_shape.rows(); });
  per_shard("tessera_ps_shard_bytes", "Bytes of the shard's block and optimizer slots.", false,
            [](const ShardInfo& i) { return i.bytes; });
  per_shard("tessera_ps_shard_updates_total",
            "Row-updating operations applied to the shard (assign, scatter, gradients).", true,
            [](const ShardInfo& i) { return i.updates; });
  per_shard("tessera_ps_shard_version",
            "The shard's version: successful mutating operations since it was created.", false,
            [](const ShardInfo& i) { return i.version; });
}

}  // namespace

std::pair<std::string, std::string> VariableAndShard(const std::string& shard_name) {
  const size_t slash = shard_name.rfind("/part_");
  if (slash != std::string::npos) {
    const std::string index = shard_name.substr(slash + 6);
    if (!index.empty() && std::all_of(index.begin(), index.end(), absl::ascii_isdigit)) {
      return {shard_name.substr(0, slash), index};
    }
  }
  return {shard_name, "0"};
}

PsMetrics::PsMetrics(caf::actor_system& system, ps_node_actor node, absl::Duration wait) {
  metrics_.AddCollector([&system, node = std::move(node), wait](MetricWriter& out) {
    const absl::StatusOr<PsNodeStats> stats = AskStats(system, node, wait);
    out.Gauge("tessera_ps_up", "1 when the PS node answered this scrape in time, else 0.", {},
              stats.ok() ? 1 : 0);
    if (stats.ok()) {
      WriteStats(*stats, out);
    } else {
      Log().warn("metrics: the ps node's stats: {}", stats.status().message());
    }
    out.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
              static_cast<double>(ResidentBytes().value_or(0)));
  });
}

HttpResponse PsMetrics::Handle(const HttpRequest& request) const {
  HttpResponse response;
  response.content_type = "text/plain; charset=utf-8";
  if (request.path != kPath && request.path != kServingPath) {
    response.status = 404;
    response.body = absl::StrCat("no page at ", request.path, ": the metrics are at ", kPath,
                                 "\n");
    return response;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    response.status = 405;
    response.body = absl::StrCat(request.method, " ", request.path, ": only GET\n");
    response.headers.emplace_back("Allow", "GET");
    return response;
  }
  response.body = PrometheusText();
  response.content_type = MetricRegistry::kContentType;
  return response;
}

absl::StatusOr<MetricsServer> BindMetricsServer(const PsMetrics& metrics, const std::string& host,
                                                int port) {
  const std::string how = "start tessera ps with another --metrics_port (or --metrics_host)";
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_port=", port, " is not a port"));
  }
  HttpServerOptions options;
  options.threads = 1;
  options.max_body_bytes = 4096;  // nothing here takes a body
  options.max_connections = 64;
  auto server = std::make_unique<HttpServer>(
      [&metrics](const HttpRequest& request) { return metrics.Handle(request); },
      [](int, absl::string_view message) { return absl::StrCat(message, "\n"); }, options);
  absl::StatusOr<int> bound = server->Bind(host, port);
  if (!bound.ok()) {
    // Which port, who has it and how to pick another (cluster/network/port_check.h).
    TESSERA_RETURN_IF_ERROR(
        CheckCanListen("tessera ps metrics", host, static_cast<uint16_t>(port), how));
    return absl::UnavailableError(absl::StrCat("--metrics_port: ", bound.status().message(),
                                               "; ", how));
  }
  return MetricsServer{std::move(server), *bound};
}

}  // namespace tessera::cli
