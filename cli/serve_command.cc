#include "cli/serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cluster/network/port_check.h"
#include "http/request_log.h"
#include "serving/load_predictor.h"
#include "serving/model_config.h"
#include "serving/model_registry.h"
#include "serving/model_server.h"
#include "serving/model_service.h"
#include "serving/version_watcher.h"
#include "tessera/status.h"

namespace tessera::cli {

using serving::CheckModelName;
using serving::LoadPredictor;
using serving::ModelConfig;
using serving::ModelRegistry;
using serving::ModelServer;
using serving::ModelService;
using serving::PredictLimits;
using serving::ReadModelConfigFile;
using serving::ServedModel;
using serving::ServedVersion;
using serving::VersionState;
using serving::VersionWatcher;
namespace {

absl::Status AtLeast(int64_t value, int64_t min, absl::string_view flag) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be at least ", min, ", got ", value));
}

absl::Status CheckOptions(const ServeOptions& options) {
  const int sources = !options.model_dir.empty() + !options.model_base_path.empty() +
                      !options.model_config_file.empty();
  if (sources != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(sources == 0 ? "needs" : "takes one of", " --model (an export), ",
                     "--model_base_path (numbered versions) or --model_config_file"));
  }
  if (!options.model_config_file.empty() && !options.name.empty()) {
    return absl::InvalidArgumentError(
        "--name names the model of --model or --model_base_path; a --model_config_file names "
        "its models itself");
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port must be in [0, 65535], got ", options.port));
  }
  for (const absl::Status& status :
       {AtLeast(options.threads, 0, "threads"),
        AtLeast(options.file_system_poll_wait_seconds, 0, "file_system_poll_wait_seconds"),
        AtLeast(options.max_body_bytes, 1, "max_body_bytes"),
        AtLeast(options.max_instances, 1, "max_instances"),
        AtLeast(options.max_connections, 1, "max_connections"),
        AtLeast(options.read_timeout_ms, 1, "read_timeout_ms"),
        AtLeast(options.idle_timeout_ms, 1, "idle_timeout_ms"),
        AtLeast(options.write_timeout_ms, 1, "write_timeout_ms")}) {
    TESSERA_RETURN_IF_ERROR(status);
  }
  if (options.request_log.empty()) {
    return absl::InvalidArgumentError("--request_log must be stderr, off or a file");
  }
  return absl::OkStatus();
}

// What --model_base_path or --model_config_file serve.
absl::StatusOr<std::vector<ModelConfig>> BasePathModels(const ServeOptions& options) {
  if (!options.model_config_file.empty()) return ReadModelConfigFile(options.model_config_file);
  ModelConfig config;
  config.base_path = options.model_base_path;
  config.name = options.name;
  if (config.name.empty()) {
    absl::string_view base = options.model_base_path;
    while (absl::ConsumeSuffix(&base, "/")) {
    }
    config.name = std::string(base.substr(base.rfind('/') + 1));
    if (!CheckModelName(config.name).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model_base_path '", options.model_base_path,
                       "' does not end in a directory name to name the model by: give --name"));
    }
  }
  TESSERA_RETURN_IF_ERROR(Annotate(CheckModelName(config.name), "--name"));
  return std::vector<ModelConfig>{std::move(config)};
}

// "version 42", "versions 1, 2", "no version yet".
std::string VersionsText(const ServedModel& model) {
  if (model.available.empty()) return "no version yet";
  std::vector<int64_t> versions;
  for (const auto& [version, served] : model.available) versions.push_back(version);
  return absl::StrCat(versions.size() == 1 ? "version " : "versions ",
                      absl::StrJoin(versions, ", "));
}

// Note [Shutdown on a signal]: SIGINT and SIGTERM are blocked from the start, before any thread
// starts (threads inherit the mask: the version watcher's, the request log's, the server's), and
// taken synchronously by one waiter thread, which may then call Stop (not async-signal-safe) like
// any other thread. The mask is restored on the way out.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
  }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

  const sigset_t& signals() const { return signals_; }

 private:
  sigset_t signals_;
  sigset_t previous_;
};

}  // namespace

absl::Status RunServe(const ServeOptions& options, std::ostream& out) {
  TESSERA_RETURN_IF_ERROR(CheckOptions(options));
  const BlockedSignals blocked;
  auto registry = std::make_shared<ModelRegistry>();
  std::unique_ptr<VersionWatcher> watcher;
  if (!options.model_dir.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor,
                             LoadPredictor(options.model_dir));
    std::string name = options.name;
    if (name.empty())
      name = predictor->model().spec.name.empty() ? "model" : predictor->model().spec.name;
    TESSERA_RETURN_IF_ERROR(CheckModelName(name));
    const int64_t step = predictor->model().step;
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const ServedVersion> version,
                             ServedVersion::Create(std::move(predictor), step));
    registry->Set(
        {name, {{step, std::move(version)}}, {{step, VersionState::kAvailable, absl::OkStatus()}}});
  } else {
    TESSERA_ASSIGN_OR_RETURN(std::vector<ModelConfig> models, BasePathModels(options));
    watcher = std::make_unique<VersionWatcher>(std::move(models), *registry);
    TESSERA_RETURN_IF_ERROR(watcher->Poll());
  }
  std::unique_ptr<RequestLog> request_log;
  if (options.request_log != "off") {
    TESSERA_ASSIGN_OR_RETURN(
        request_log, RequestLog::Open(options.request_log == "stderr" ? "-" : options.request_log));
  }
  PredictLimits limits;
  limits.max_instances = options.max_instances;
  const ModelService service(registry, limits);
  HttpServerOptions http;
  http.max_body_bytes = static_cast<size_t>(options.max_body_bytes);
  http.max_connections = options.max_connections;
  http.read_timeout_ms = options.read_timeout_ms;
  http.idle_timeout_ms = options.idle_timeout_ms;
  http.write_timeout_ms = options.write_timeout_ms;
  http.threads = options.threads;
  http.request_log = request_log.get();
  ModelServer server(service, http);
  absl::StatusOr<int> port = server.Bind(options.host, options.port);
  if (!port.ok()) {
    // Which port, who has it and how to pick another (cluster/network/port_check.h).
    const std::string how = "give tessera serve another --port (or --host)";
    TESSERA_RETURN_IF_ERROR(
        CheckCanListen("tessera serve", options.host, static_cast<uint16_t>(options.port), how));
    return absl::UnavailableError(absl::StrCat(port.status().message(), "; ", how));
  }

  std::atomic<bool> finished{false};
  std::atomic<int> received{0};
  std::thread waiter([&] {
    const timespec tick{0, 100'000'000};
    while (!finished) {
      const int signal = sigtimedwait(&blocked.signals(), nullptr, &tick);
      if (signal > 0) {
        received = signal;
        server.Stop();
        return;
      }
    }
  });
  if (watcher != nullptr && options.file_system_poll_wait_seconds > 0) {
    watcher->Start(std::chrono::seconds(options.file_system_poll_wait_seconds));
  }

  const std::string host = options.host.find(':') != std::string::npos
                               ? absl::StrCat("[", options.host, "]")
                               : options.host;
  for (const auto& [name, model] : *registry->Snapshot()) {
    out << "tessera serve: model '" << name << "' " << VersionsText(model) << " at http://" << host
        << ":" << *port << "/v1/models/" << name << std::endl;
  }
  const absl::Status status = server.Run();
  finished = true;
  waiter.join();
  if (watcher != nullptr) watcher->Stop();
  if (received != 0) {
    out << "tessera serve: stopped on " << (received == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
  }
  return status;
}

}  // namespace tessera::cli
