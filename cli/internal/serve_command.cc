#include "cli/internal/serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cli/internal/load_predictor.h"
#include "cli/internal/model_server.h"
#include "cli/internal/model_service.h"
#include "cluster/port_check.h"
#include "core/status.h"

namespace tessera::cli {
namespace {

absl::Status AtLeast(int64_t value, int64_t min, absl::string_view flag) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be at least ", min, ", got ",
                                                 value));
}

absl::Status CheckOptions(const ServeOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", options.port));
  }
  for (const absl::Status& status :
       {AtLeast(options.threads, 0, "threads"),
        AtLeast(options.max_body_bytes, 1, "max_body_bytes"),
        AtLeast(options.max_instances, 1, "max_instances"),
        AtLeast(options.max_connections, 1, "max_connections"),
        AtLeast(options.read_timeout_ms, 1, "read_timeout_ms"),
        AtLeast(options.idle_timeout_ms, 1, "idle_timeout_ms"),
        AtLeast(options.write_timeout_ms, 1, "write_timeout_ms")}) {
    RETURN_IF_ERROR(status);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunServe(const ServeOptions& options, std::ostream& out) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor, LoadPredictor(options.model_dir));
  std::string name = options.name;
  if (name.empty())
    name = predictor->model().spec.name.empty() ? "model" : predictor->model().spec.name;
  PredictLimits limits;
  limits.max_instances = options.max_instances;
  ASSIGN_OR_RETURN(const std::unique_ptr<ModelService> service,
                   ModelService::Create(std::move(predictor), name, limits));
  HttpServerOptions http;
  http.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  http.max_connections = options.max_connections;
  http.read_timeout_ms = options.read_timeout_ms;
  http.idle_timeout_ms = options.idle_timeout_ms;
  http.write_timeout_ms = options.write_timeout_ms;
  http.threads = options.threads;
  ModelServer server(*service, http);
  absl::StatusOr<int> port = server.Bind(options.host, options.port);
  if (!port.ok()) {
    // Which port, who has it and how to pick another (cluster/port_check.h).
    const std::string how = "give tessera serve another --port (or --host)";
    RETURN_IF_ERROR(CheckCanListen("tessera serve", options.host,
                                   static_cast<uint16_t>(options.port), how));
    return absl::UnavailableError(absl::StrCat(port.status().message(), "; ", how));
  }

  // Note [Shutdown on a signal]: SIGINT and SIGTERM are blocked here, before the server starts its
  // threads (they inherit the mask), and taken synchronously by one waiter thread, which may
  // then call Stop (not async-signal-safe) like any other thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &signals, &previous);
  std::atomic<bool> finished{false};
  std::atomic<int> received{0};
  std::thread waiter([&] {
    const timespec tick{0, 100'000'000};
    while (!finished) {
      const int signal = sigtimedwait(&signals, nullptr, &tick);
      if (signal > 0) {
        received = signal;
        server.Stop();
        return;
      }
    }
  });

  const std::string host = options.host.find(':') != std::string::npos
                               ? absl::StrCat("[", options.host, "]")
                               : options.host;
  out << "tessera serve: model '" << service->name() << "' version " << service->version()
      << " at http://" << host << ":" << *port << "/v1/models/" << service->name() << std::endl;
  const absl::Status status = server.Run();
  finished = true;
  waiter.join();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (received != 0) {
    out << "tessera serve: stopped on " << (received == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
  }
  return status;
}

}  // namespace tessera::cli
