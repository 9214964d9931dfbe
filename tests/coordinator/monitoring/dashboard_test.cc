// coordinator/monitoring/dashboard.h: the page, the JSON API and the metrics over HTTP, with fake
// sources.
#include "coordinator/monitoring/dashboard.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "tests/raw_http.h"

namespace tessera {
namespace {

using std::chrono::seconds;
using testing::RawConnection;
using testing::RawResponse;

RawResponse Get(int port, const std::string& path, const std::string& method = "GET") {
  RawConnection connection(port);
  REQUIRE(connection.Send(absl::StrCat(method, " ", path,
                                       " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  std::optional<RawResponse> response = connection.Read(seconds(10), method == "HEAD");
  REQUIRE(response.has_value());
  return *response;
}

struct FakeSources {
  MetricRegistry metrics;
  std::atomic<int> run_calls{0};
  DashboardSources Sources() {
    metrics.AddCounter("fake_steps_total", "Steps.", {}).With({}).Increment(12);
    DashboardSources sources;
    sources.run = [this] {
      ++run_calls;
      return nlohmann::json{{"workload", "fake"}, {"step", 12}, {"detail", "\xff not utf-8"}};
    };
    sources.cluster = [] { return nlohmann::json{{"ps", nlohmann::json::array()}}; };
    sources.metrics = &metrics;
    return sources;
  }
};

TEST_CASE("the dashboard serves its page, the run and cluster JSON, and Prometheus metrics") {
  FakeSources fake;
  auto dashboard = Dashboard::Start({"127.0.0.1", 0}, fake.Sources());
  REQUIRE_MESSAGE(dashboard.ok(), dashboard.status().ToString());
  const int port = (*dashboard)->port();
  CHECK(port > 0);
  CHECK((*dashboard)->url() == absl::StrCat("http://127.0.0.1:", port, "/"));

  const RawResponse page = Get(port, "/");
  CHECK(page.status == 200);
  CHECK(absl::StartsWith(page.headers.at("content-type"), "text/html"));
  CHECK(absl::StrContains(page.body, "<table id=\"ps\">"));
  CHECK(absl::StrContains(page.body, "fetch(\"api/run\")"));
  CHECK_FALSE(absl::StrContains(page.body, "https://"));  // nothing from outside

  const RawResponse run = Get(port, "/api/run");
  CHECK(run.status == 200);
  const auto run_json = nlohmann::json::parse(run.body);  // valid JSON, bad bytes replaced
  CHECK(run_json["workload"] == "fake");
  CHECK(run_json["step"] == 12);
  CHECK(fake.run_calls == 1);
  CHECK(nlohmann::json::parse(Get(port, "/api/cluster").body)["ps"].is_array());

  for (const char* path : {"/metrics", "/monitoring/prometheus/metrics"}) {
    const RawResponse metrics = Get(port, path);
    CHECK(metrics.status == 200);
    CHECK(absl::StartsWith(metrics.headers.at("content-type"), "text/plain; version=0.0.4"));
    CHECK(absl::StrContains(metrics.body, "\nfake_steps_total 12\n"));
  }

  const RawResponse missing = Get(port, "/api/nothing");
  CHECK(missing.status == 404);
  CHECK(absl::StrContains(nlohmann::json::parse(missing.body)["error"].get<std::string>(),
                          "/api/cluster"));
  const RawResponse post = Get(port, "/api/run", "POST");
  CHECK(post.status == 405);
  CHECK(post.headers.at("allow") == "GET");
}

TEST_CASE("a busy port or a missing source is refused, naming the flag") {
  FakeSources fake;
  auto first = Dashboard::Start({"127.0.0.1", 0}, fake.Sources());
  REQUIRE(first.ok());
  FakeSources other;
  auto second = Dashboard::Start({"127.0.0.1", (*first)->port()}, other.Sources());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(second.status().message(), "--dashboard_port"));

  DashboardSources none;
  CHECK(Dashboard::Start({"127.0.0.1", 0}, none).status().code() ==
        absl::StatusCode::kInvalidArgument);
  FakeSources third;
  CHECK(Dashboard::Start({"127.0.0.1", 70000}, third.Sources()).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a source that throws is answered 500, and the dashboard keeps serving") {
  FakeSources fake;
  DashboardSources sources = fake.Sources();
  sources.cluster = []() -> nlohmann::json { throw std::runtime_error("no cluster"); };
  auto dashboard = Dashboard::Start({"127.0.0.1", 0}, std::move(sources));
  REQUIRE(dashboard.ok());
  CHECK(Get((*dashboard)->port(), "/api/cluster").status == 500);
  CHECK(Get((*dashboard)->port(), "/api/run").status == 200);
}

}  // namespace
}  // namespace tessera
