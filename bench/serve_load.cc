// serve_load: predict latency and throughput of `tessera serve` under concurrent clients on
// loopback. It exports the reference recsys model (U=100k, I=10k, D=32, hidden 64), starts the
// `tessera` binary given by --tessera on it and, for each request size of --instances, runs
// --clients client threads, each on a keep-alive connection of its own sending predicts back to
// back (each client cycles through 64 requests of different users and items) for --seconds after
// --warmup_seconds, and prints:
//
//   p50, p99   of every request's latency as its client sees it (send to the answer's last byte)
//   req/s      requests answered per second, all clients together (and instances/s)
//
// each the median of --rounds rounds. The server logs each request to --request_log ("file": a
// file in the temporary directory, as a deployment would; "off": none). Several, comma-separated,
// start a server each and interleave their rounds, so that they compare on the same load of a
// shared machine:
//
//   serve_load                                   # 8 clients, 1 and 100 instances, log to a file
//   serve_load --request_log=file,off --rounds=5 # what the request log costs
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/serve_client.h"

ABSL_FLAG(std::string, tessera, TESSERA_BINARY, "the tessera binary to serve with");
ABSL_FLAG(int, clients, 8, "concurrent clients, each on its own keep-alive connection");
ABSL_FLAG(std::string, instances, "1,100", "instances per request: one measurement each");
ABSL_FLAG(double, seconds, 5, "measured seconds per round");
ABSL_FLAG(double, warmup_seconds, 1, "unmeasured seconds before each round");
ABSL_FLAG(int, rounds, 3, "rounds per request size (each figure is their median)");
ABSL_FLAG(std::string, request_log, "file",
          "the servers' --request_log, comma-separated: file (in the temporary directory) or off");
ABSL_FLAG(int, server_threads, 0, "the server's --threads (0: one per core)");

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Round {
  double p50_ms = 0;
  double p99_ms = 0;
  double requests_per_second = 0;
};

absl::StatusOr<Round> RunRound(int port, int64_t instances) {
  const int clients = absl::GetFlag(FLAGS_clients);
  const auto warmup = std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup_seconds));
  const auto measured = std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds));
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<int> failures{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from =
      start + std::chrono::duration_cast<Clock::duration>(warmup);
  const Clock::time_point stop =
      measure_from + std::chrono::duration_cast<Clock::duration>(measured);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::vector<std::string> requests;
      for (int r = 0; r < 64; ++r) {
        requests.push_back(Post(Instances(instances, 0, (c * 64 + r) * instances), false));
      }
      auto connection = std::make_unique<Connection>(port);
      std::vector<double>& mine = latencies[c];
      mine.reserve(200'000);
      for (size_t i = 0;; ++i) {
        const Clock::time_point sent = Clock::now();
        if (sent >= stop) break;
        bool closing = false;
        const int status = connection->Exchange(requests[i % requests.size()], closing);
        const Clock::time_point answered = Clock::now();
        if (status != 200) {
          ++failures;
          return;
        }
        if (closing) connection = std::make_unique<Connection>(port);
        if (sent >= measure_from && answered <= stop) {
          mine.push_back(std::chrono::duration<double, std::milli>(answered - sent).count());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (failures > 0) {
    return absl::InternalError(absl::StrCat(failures.load(), " clients got an error answer"));
  }
  std::vector<double> all;
  for (const std::vector<double>& mine : latencies) all.insert(all.end(), mine.begin(), mine.end());
  if (all.empty()) return absl::InternalError("no request completed in the measured time");
  std::sort(all.begin(), all.end());
  Round round;
  round.p50_ms = bench::Quantile(all, 0.50);
  round.p99_ms = bench::Quantile(all, 0.99);
  round.requests_per_second = static_cast<double>(all.size()) / measured.count();
  return round;
}

absl::Status Run(int argc, char** argv) {
  std::printf("%s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  char pattern[] = "/tmp/serve_load_XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = pattern;
  TESSERA_RETURN_IF_ERROR(ExportRecsys(dir));
  const std::vector<std::string> logs = absl::StrSplit(absl::GetFlag(FLAGS_request_log), ',');
  std::vector<std::unique_ptr<ServeProcess>> servers;
  for (size_t s = 0; s < logs.size(); ++s) {
    if (logs[s] != "file" && logs[s] != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("--request_log: '", logs[s], "' is neither file nor off"));
    }
    servers.push_back(std::make_unique<ServeProcess>());
    TESSERA_RETURN_IF_ERROR(servers.back()->Start(
        absl::GetFlag(FLAGS_tessera),
        {"--model", dir, "--request_log",
         logs[s] == "off" ? "off" : absl::StrCat(dir, "/requests-", s, ".log"), "--threads",
         std::to_string(absl::GetFlag(FLAGS_server_threads))},
        absl::StrCat(dir, "/serve-", s, ".log")));
  }
  std::printf("server: %s --threads=%d; %d clients, %u cores\n",
              absl::GetFlag(FLAGS_tessera).c_str(), absl::GetFlag(FLAGS_server_threads),
              absl::GetFlag(FLAGS_clients), std::thread::hardware_concurrency());
  for (absl::string_view size : absl::StrSplit(absl::GetFlag(FLAGS_instances), ',')) {
    int64_t instances = 0;
    if (!absl::SimpleAtoi(size, &instances) || instances < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--instances: bad count '", size, "'"));
    }
    std::vector<std::vector<double>> p50(logs.size()), p99(logs.size()), rate(logs.size());
    for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
      for (size_t s = 0; s < servers.size(); ++s) {
        TESSERA_ASSIGN_OR_RETURN(const Round round, RunRound(servers[s]->port(), instances));
        std::printf(
            "  %4lld instances, request log %-4s, round %d: p50 %7.3f ms  p99 %7.3f ms  "
            "%8.0f req/s\n",
            static_cast<long long>(instances), logs[s].c_str(), r + 1, round.p50_ms, round.p99_ms,
            round.requests_per_second);
        p50[s].push_back(round.p50_ms);
        p99[s].push_back(round.p99_ms);
        rate[s].push_back(round.requests_per_second);
      }
    }
    for (size_t s = 0; s < servers.size(); ++s) {
      std::printf(
          "%4lld instances/request, request log %-4s: p50 %.3f ms, p99 %.3f ms, %.0f req/s "
          "(%.0f instances/s); median of %zu rounds\n",
          static_cast<long long>(instances), logs[s].c_str(), Median(p50[s]), Median(p99[s]),
          Median(rate[s]), Median(rate[s]) * static_cast<double>(instances), rate[s].size());
    }
  }
  for (size_t s = 0; s < servers.size(); ++s) {
    std::printf("server %zu (request log %s): peak RSS %ld MiB\n", s, logs[s].c_str(),
                servers[s]->PeakMiB());
  }
  servers.clear();
  const std::string cleanup = "rm -rf " + dir;
  return std::system(cleanup.c_str()) == 0 ? absl::OkStatus()
                                           : absl::InternalError("cannot remove " + dir);
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  return tessera::bench::Main("serve_load", argc, argv, tessera::bench::Run);
}
