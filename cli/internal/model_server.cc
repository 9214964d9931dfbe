#include "cli/internal/model_server.h"

#include <utility>

namespace tessera::cli {

ModelServer::ModelServer(const ModelService& service, HttpServerOptions options)
    : http_(
          // Every method goes to the service, which knows which resources take which (405).
          [&service](const HttpRequest& request) {
            HttpReply reply = service.Handle(request.method, request.path, request.body);
            HttpResponse response;
            response.status = reply.status;
            response.body = std::move(reply.body);
            if (!reply.allow.empty()) response.headers.emplace_back("Allow", reply.allow);
            return response;
          },
          [](int, absl::string_view message) { return ErrorBody(message); }, options) {}

}  // namespace tessera::cli
