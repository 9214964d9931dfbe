#include "coordinator/monitoring/dashboard.h"

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/monitoring/internal/dashboard_page.h"
#include "core/base/logging.h"

namespace tessera {
namespace {

std::string ErrorJson(absl::string_view message) {
  return nlohmann::json{{"error", std::string(message)}}.dump();
}

HttpResponse Json(int status, const nlohmann::json& body) {
  HttpResponse response;
  response.status = status;
  // A source's text may hold bytes that are not UTF-8 (a peer's error): replaced, never thrown.
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  response.headers.emplace_back("Cache-Control", "no-store");
  return response;
}

}  // namespace

Dashboard::Dashboard(std::string host, DashboardSources sources)
    : host_(std::move(host)),
      sources_(std::move(sources)),
      server_([this](const HttpRequest& request) { return Answer(request); },
              [](int, absl::string_view message) { return ErrorJson(message); },
              [] {
                HttpServerOptions options;
                options.threads = 2;                     // a page and a scraper at once
                options.max_body_bytes = size_t{64} << 10;  // nothing here takes a body
                options.max_connections = 64;
                return options;
              }()) {}

absl::StatusOr<std::unique_ptr<Dashboard>> Dashboard::Start(const DashboardOptions& options,
                                                            DashboardSources sources) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dashboard_port must be in [0, 65535], got ", options.port));
  }
  if (!sources.run || !sources.cluster || sources.metrics == nullptr) {
    return absl::InvalidArgumentError("a dashboard needs its run, cluster and metrics sources");
  }
  std::unique_ptr<Dashboard> dashboard(new Dashboard(options.host, std::move(sources)));
  absl::StatusOr<int> port = dashboard->server_.Bind(options.host, options.port);
  if (!port.ok()) {
    return absl::UnavailableError(absl::StrCat("the dashboard cannot listen on ", options.host,
                                               ":", options.port, " (", port.status().message(),
                                               "); choose another with --dashboard_port"));
  }
  dashboard->port_ = *port;
  Dashboard* self = dashboard.get();
  dashboard->thread_ = std::thread([self] {
    const absl::Status status = self->server_.Run();
    if (!status.ok()) Log().error("dashboard: {}", status);
  });
  return dashboard;
}

Dashboard::~Dashboard() {
  server_.Stop();
  if (thread_.joinable()) thread_.join();
}

std::string Dashboard::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return absl::StrCat("http://", v6 ? "[" : "", host_, v6 ? "]" : "", ":", port_, "/");
}

HttpResponse Dashboard::Answer(const HttpRequest& request) const {
  if (request.method != "GET" && request.method != "HEAD") {
    HttpResponse response = Json(405, {{"error", absl::StrCat("method ", request.method,
                                                              " is not allowed; use GET")}});
    response.headers.emplace_back("Allow", "GET");
    return response;
  }
  const std::string& path = request.path;
  if (path == "/" || path == "/index.html") {
    HttpResponse response;
    response.body = internal::kDashboardPage;
    response.content_type = "text/html; charset=utf-8";
    return response;
  }
  if (path == "/metrics" || path == "/monitoring/prometheus/metrics") {
    HttpResponse response;
    response.body = sources_.metrics->PrometheusText();
    response.content_type = MetricRegistry::kContentType;
    return response;
  }
  if (path == "/api/run") return Json(200, sources_.run());
  if (path == "/api/cluster") return Json(200, sources_.cluster());
  return Json(404, {{"error", absl::StrCat("no resource '", path,
                                           "'; the dashboard answers /, /api/run, /api/cluster "
                                           "and /metrics")}});
}

}  // namespace tessera
