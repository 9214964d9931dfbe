#include "serving/model_server.h"

#include <chrono>
#include <utility>

namespace tessera::serving {

ModelServer::ModelServer(const ModelService& service, HttpServerOptions options)
    : metrics_(service.registry()),
      http_(
          // Every method goes to the service, which knows which resources take which (405).
          [this, &service](const HttpRequest& request) {
            const auto start = std::chrono::steady_clock::now();
            HttpReply reply;
            HttpResponse response;
            if (request.path == ServingMetrics::kPath) {
              if (request.method == "GET" || request.method == "HEAD") {
                response.body = metrics_.PrometheusText();
                response.content_type = MetricRegistry::kContentType;
                metrics_.RecordResponse(200);
                return response;
              }
              reply = HttpReply::MethodNotAllowed(request.method, request.path, "GET");
            } else {
              reply = service.Handle(request.method, request.path, request.body);
            }
            metrics_.Record(
                reply,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            response.status = reply.status;
            response.body = std::move(reply.body);
            if (!reply.allow.empty()) response.headers.emplace_back("Allow", reply.allow);
            return response;
          },
          [this](int status, absl::string_view message) {
            metrics_.RecordResponse(status);
            return ErrorBody(message);
          },
          options) {}

}  // namespace tessera::serving
