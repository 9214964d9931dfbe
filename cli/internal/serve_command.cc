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
#include "core/status.h"

namespace tessera::cli {

absl::Status RunServe(const ServeOptions& options, std::ostream& out) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", options.port));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor, LoadPredictor(options.model_dir));
  std::string name = options.name;
  if (name.empty())
    name = predictor->model().spec.name.empty() ? "model" : predictor->model().spec.name;
  ASSIGN_OR_RETURN(const std::unique_ptr<ModelService> service,
                   ModelService::Create(std::move(predictor), name));
  ModelServer server(*service);
  ASSIGN_OR_RETURN(const int port, server.Bind(options.host, options.port));

  // Note [Shutdown on a signal]: SIGINT and SIGTERM are blocked here, before httplib starts its
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
      << " at http://" << host << ":" << port << "/v1/models/" << service->name() << std::endl;
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
