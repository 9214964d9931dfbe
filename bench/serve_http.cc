// serve_http: what `tessera serve` costs a client and itself over HTTP on loopback. It exports the
// reference recsys model (U=100k, I=10k, D=32, hidden 64), starts the `tessera` binary given by
// --tessera on it, and measures, as one client:
//
//   keep-alive   --requests sequential 1-instance predicts on one connection (a new connection
//                only when the server closes one), req/s
//   close        the same, each with "Connection: close" on a connection of its own, req/s
//   max-size     the largest request the server takes: 10000 instances padded with spaces to
//                --big_body_mb; its status and what it adds to a fresh server's peak RSS (VmHWM)
//   big body     --big_body_mb of instances (1.7 million at 50): the same
//
// req/s are the median of --rounds rounds. Point --tessera at another build to compare servers:
//
//   serve_http                                   # the tessera binary of this build
//   serve_http --tessera=/tmp/old/tessera --rounds=1
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/serve_client.h"

ABSL_FLAG(std::string, tessera, TESSERA_BINARY, "the tessera binary to serve with");
ABSL_FLAG(int, requests, 2000, "sequential requests per round, keep-alive and close each");
ABSL_FLAG(int, rounds, 3, "rounds (req/s is their median)");
ABSL_FLAG(int, big_body_mb, 50, "the size of the max-size and big-body requests, in MB");

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Requests per second of `requests` sequential predicts; `reconnects` counts the connections the
// server closed under a keep-alive client.
absl::StatusOr<double> RequestsPerSecond(int port, int requests, bool close, int& reconnects) {
  const std::string request = Post(Instances(1), close);
  auto connection = std::make_unique<Connection>(port);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < requests; ++i) {
    if (close && i > 0) connection = std::make_unique<Connection>(port);
    bool closing = false;
    const int status = connection->Exchange(request, closing);
    if (status != 200) return absl::InternalError(absl::StrCat("a predict got HTTP ", status));
    if (closing && !close) {
      ++reconnects;
      connection = std::make_unique<Connection>(port);
    }
  }
  return requests / std::chrono::duration<double>(Clock::now() - start).count();
}

// The status of one request to a fresh server and what it added to the server's peak RSS.
absl::Status MeasureBig(const std::string& dir, const char* name, const std::string& body) {
  ServeProcess server;
  TESSERA_RETURN_IF_ERROR(
      server.Start(absl::GetFlag(FLAGS_tessera), {"--model", dir}, dir + "/serve_big.log"));
  const long before = server.PeakMiB();
  Connection connection(server.port());
  bool closing = false;
  const Clock::time_point start = Clock::now();
  const int status = connection.Exchange(Post(body, true), closing);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const long after = server.PeakMiB();
  std::printf("%-10s %6.1f MB body: HTTP %d in %.2f s; server peak RSS %ld -> %ld MiB (+%ld)\n",
              name, body.size() / 1e6, status, seconds, before, after, after - before);
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  std::printf("%s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  char pattern[] = "/tmp/serve_http_XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = pattern;
  TESSERA_RETURN_IF_ERROR(ExportRecsys(dir));
  ServeProcess server;
  TESSERA_RETURN_IF_ERROR(
      server.Start(absl::GetFlag(FLAGS_tessera), {"--model", dir}, dir + "/serve.log"));
  std::printf("server: %s, idle peak RSS %ld MiB\n", absl::GetFlag(FLAGS_tessera).c_str(),
              server.PeakMiB());

  const int requests = absl::GetFlag(FLAGS_requests);
  std::vector<double> keep_alive, close;
  int reconnects = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    int closed = 0;
    TESSERA_ASSIGN_OR_RETURN(double rate,
                             RequestsPerSecond(server.port(), requests, false, closed));
    keep_alive.push_back(rate);
    reconnects += closed;
    TESSERA_ASSIGN_OR_RETURN(rate, RequestsPerSecond(server.port(), requests, true, closed));
    close.push_back(rate);
  }
  std::printf(
      "keep-alive %6d requests: %8.0f req/s (median of %zu; the server closed %d "
      "connections)\n",
      requests, Median(keep_alive), keep_alive.size(), reconnects);
  std::printf("close      %6d requests: %8.0f req/s (median of %zu)\n", requests, Median(close),
              close.size());

  const size_t big = static_cast<size_t>(absl::GetFlag(FLAGS_big_body_mb)) * 1'000'000;
  TESSERA_RETURN_IF_ERROR(MeasureBig(dir, "max-size", Instances(10'000, big)));
  TESSERA_RETURN_IF_ERROR(MeasureBig(dir, "big body", Instances(-1, big)));
  std::string cleanup = "rm -rf " + dir;
  return std::system(cleanup.c_str()) == 0 ? absl::OkStatus()
                                           : absl::InternalError("cannot remove " + dir);
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  return tessera::bench::Main("serve_http", argc, argv, tessera::bench::Run);
}
