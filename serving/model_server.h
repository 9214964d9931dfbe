// ModelServer: a ModelService (model_service.h) on an HTTP socket, with HttpServer
// (http_server.h) and its bounds on what a client can cost, and the server's metrics
// (serving_metrics.h) at GET /monitoring/prometheus/metrics.
//
//   ModelServer server(service);                               // or (service, options)
//   TESSERA_ASSIGN_OR_RETURN(int port, server.Bind("127.0.0.1", 0));  // 0: any free port
//   std::thread thread([&] { server.Run(); });                 // serves until Stop
//   ...
//   server.Stop();
//   thread.join();
//
// Every reply, the transport's own errors included (413 for a body over
// options.max_body_bytes, 408 for a request too slow to arrive, 503 for too many connections or
// for running out of memory), is JSON {"error": "..."}.
//
// Thread-safety: Bind, then Run on one thread; Stop may be called from any thread at any time
// (before Run too: Run then returns at once). Not async-signal-safe: call Stop from a thread.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "http/http_server.h"
#include "serving/model_service.h"
#include "serving/serving_metrics.h"

namespace tessera::serving {

class ModelServer {
 public:
  // `service` must outlive the server.
  explicit ModelServer(const ModelService& service, HttpServerOptions options = {});

  // Binds and listens on host:port (port 0: a free port) and returns the port. Unavailable when
  // the address cannot be bound (in use, not local); InvalidArgument for options out of range.
  absl::StatusOr<int> Bind(const std::string& host, int port) { return http_.Bind(host, port); }
  // Accepts and answers requests until Stop. FailedPrecondition without a Bind.
  absl::Status Run() { return http_.Run(); }
  // Makes Run return (waiting until it has) and closes the connections.
  void Stop() { http_.Stop(); }

 private:
  ServingMetrics metrics_;  // before http_, whose handler uses it
  HttpServer http_;
};

}  // namespace tessera::serving
