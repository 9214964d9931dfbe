// `tessera ps --metrics_port`: the Prometheus page of a real `tessera ps` process, before and
// after a coordinator (this test, through Cluster::Connect) places and updates shards on it; the
// coordinator's QueryPsStatus on the same networked node; a busy metrics port.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/ps_metrics.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/cluster_status.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/ps/strategy.h"
#include "tessera/partitioner.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cli/tessera_child.h"
#include "tests/listener.h"

#include <httplib.h>

namespace tessera::cli {
namespace {

using tessera::testing::TempDir;
using testing::Child;
using testing::Finished;
using testing::Has;
using testing::PollUntil;
using testing::RunTessera;

// The port after `marker` in the child's stdout, once printed; -1 if not within 15 s.
int PortAfter(Child& child, const std::string& marker) {
  int port = -1;
  PollUntil(
      [&] {
        if (!child.Alive()) return true;  // it will print nothing more
        const std::string out = child.out();
        const size_t at = out.find(marker);
        if (at == std::string::npos) return false;
        const size_t begin = at + marker.size();
        size_t end = begin;
        while (end < out.size() && out[end] >= '0' && out[end] <= '9') ++end;
        int printed = -1;
        if (end == begin || !absl::SimpleAtoi(out.substr(begin, end - begin), &printed)) {
          return false;
        }
        port = printed;
        return true;
      },
      absl::Seconds(15));
  return port;
}

std::string Scrape(int port, const std::string& path = "/metrics") {
  httplib::Client client("127.0.0.1", port);
  auto response = client.Get(path.c_str());
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  return response->body;
}

// A line of the page, exactly.
bool HasLine(const std::string& page, const std::string& line) {
  return Has("\n" + page, "\n" + line + "\n");
}

TEST_CASE("shard names split into the variable and shard labels") {
  CHECK(VariableAndShard("emb/part_3") == std::pair<std::string, std::string>{"emb", "3"});
  CHECK(VariableAndShard("a/b/part_12") == std::pair<std::string, std::string>{"a/b", "12"});
  CHECK(VariableAndShard("bias") == std::pair<std::string, std::string>{"bias", "0"});
  CHECK(VariableAndShard("x/part_") == std::pair<std::string, std::string>{"x/part_", "0"});
  CHECK(VariableAndShard("v/worker_1") == std::pair<std::string, std::string>{"v/worker_1", "0"});
}

TEST_CASE("tessera ps --metrics_port serves the node's shards to Prometheus") {
  TempDir dir;
  Child ps(dir, {"ps", "--port", "0", "--metrics_port", "0", "--threads", "1"}, "/dev/null");
  const int port = PortAfter(ps, "listening on 127.0.0.1:");
  const int metrics_port = PortAfter(ps, "tessera ps: metrics on http://127.0.0.1:");
  REQUIRE_MESSAGE(port > 0, std::string(ps.out() + ps.err()));
  REQUIRE_MESSAGE(metrics_port > 0, std::string(ps.out() + ps.err()));
  CHECK(Has(ps.out(), absl::StrCat("metrics on http://127.0.0.1:", metrics_port, "/metrics\n")));

  std::string page = Scrape(metrics_port);
  CHECK_MESSAGE(HasLine(page, "tessera_ps_up 1"), page);
  CHECK(HasLine(page, "tessera_ps_shards 0"));
  CHECK(HasLine(page, "tessera_ps_bytes 0"));
  CHECK(HasLine(page, "# TYPE process_resident_memory_bytes gauge"));
  CHECK(!Has(page, "tessera_ps_shard_rows"));

  {
    ClusterSpec spec;
    spec.ps = {NodeAddress{"127.0.0.1", static_cast<uint16_t>(port)}};
    spec.workers = {NodeAddress{"127.0.0.1", 1}};
    spec.coordinator = NodeAddress{"127.0.0.1", 2};
    NetworkOptions network;
    network.connect_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Connect(spec, network, 1);
    REQUIRE_MESSAGE(cluster.ok(), cluster.status().ToString());
    absl::StatusOr<Partitioner> two = FixedShardsPartitioner(2);
    REQUIRE(two.ok());
    ParameterServerStrategy strategy(**cluster, *two);
    VariableOptions options;
    options.name = "emb";
    options.shape = Shape{10, 4};
    absl::StatusOr<ShardedVariable> emb = strategy.CreateVariable(options);
    REQUIRE_MESSAGE(emb.ok(), emb.status().ToString());
    REQUIRE(emb->ScatterAdd({7, 7, 8}, Tensor(Shape{3, 4}, 1.0f)).ok());
    REQUIRE(emb->ScatterAdd({9}, Tensor(Shape{1, 4}, 1.0f)).ok());

    page = Scrape(metrics_port);
    CHECK_MESSAGE(HasLine(page, "tessera_ps_shards 2"), page);
    CHECK(HasLine(page, "tessera_ps_bytes 160"));  // 10 rows of 4 floats, no slots
    CHECK(HasLine(page, "# TYPE tessera_ps_shard_updates_total counter"));
    CHECK(HasLine(page, R"(tessera_ps_shard_rows{variable="emb",shard="0"} 5)"));
    CHECK(HasLine(page, R"(tessera_ps_shard_bytes{variable="emb",shard="1"} 80)"));
    CHECK(HasLine(page, R"(tessera_ps_shard_updates_total{variable="emb",shard="0"} 0)"));
    CHECK(HasLine(page, R"(tessera_ps_shard_updates_total{variable="emb",shard="1"} 2)"));
    CHECK(HasLine(page, R"(tessera_ps_shard_version{variable="emb",shard="1"} 2)"));
    // TF Serving's path serves the same page.
    CHECK(Has(Scrape(metrics_port, "/monitoring/prometheus/metrics"),
              R"(tessera_ps_shard_updates_total{variable="emb",shard="1"} 2)"));

    // The coordinator's view of the same node, across processes.
    const std::vector<PsNodeStatus> status = QueryPsStatus(**cluster, absl::Seconds(10));
    REQUIRE(status.size() == 1);
    CHECK_MESSAGE(status[0].reachable, status[0].error);
    CHECK(status[0].address == absl::StrCat("127.0.0.1:", port));
    REQUIRE(status[0].stats.shards.size() == 2);
    const ShardInfo& part_1 = status[0].stats.shards[1];
    CHECK(part_1.name == "emb/part_1");
    CHECK(part_1.updates == 2);
    CHECK(part_1.rows_touched == 3);
    REQUIRE(part_1.hottest_rows.size() == 3);
    CHECK(part_1.hottest_rows[0].row == 7);
    CHECK(part_1.hottest_rows[0].updates == 2);
  }

  httplib::Client client("127.0.0.1", metrics_port);
  auto posted = client.Post("/metrics", "", "text/plain");
  REQUIRE(posted);
  CHECK(posted->status == 405);
  CHECK(posted->get_header_value("Allow") == "GET");
  auto elsewhere = client.Get("/v1/models");
  REQUIRE(elsewhere);
  CHECK(elsewhere->status == 404);

  ps.Signal(SIGTERM);
  CHECK(ps.Wait() == 0);
  CHECK(Has(ps.out(), "tessera ps: stopped on SIGTERM"));
}

TEST_CASE("tessera ps fails at once on a metrics port another process listens on") {
  TempDir dir;
  const tessera::testing::Listener listener;
  const std::string busy = std::to_string(listener.port());

  const Finished taken =
      RunTessera(dir, {"ps", "--port", "0", "--metrics_port", busy, "--threads", "1"});
  CHECK(taken.code == 1);
  CHECK_MESSAGE(Has(taken.err, "tessera ps metrics cannot listen on 127.0.0.1:" + busy +
                                   ": another process listens on port " + busy),
                taken.err);
  CHECK_MESSAGE(Has(taken.err, "start tessera ps with another --metrics_port (or --metrics_host)"),
                taken.err);
  CHECK(!Has(taken.out, "listening on"));  // the node never listened

  const Finished bad = RunTessera(dir, {"ps", "--port", "0", "--metrics_port", "70000"});
  CHECK(bad.code != 0);
  CHECK_MESSAGE(Has(bad.err, "--metrics_port=70000 is not a port"), bad.err);
}

}  // namespace
}  // namespace tessera::cli
