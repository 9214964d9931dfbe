// The `tessera` binary: parses the command line and runs a command of cli/internal/.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "cli/internal/inspect_command.h"
#include "cli/internal/predict_command.h"
#include "cli/internal/ps_command.h"
#include "cli/internal/serve_command.h"
#include "core/logging.h"

ABSL_FLAG(std::string, model, "", "predict, serve: the exported model's directory");
ABSL_FLAG(std::string, model_base_path, "",
          "serve: a directory of numbered versions (1/, 2/, ... each an export), served as TF "
          "Serving does: the newest, new versions picked up and removed ones unloaded");
ABSL_FLAG(std::string, model_config_file, "",
          "serve: TF Serving's model config file (text format: model_config_list { config { name: "
          "\"a\" base_path: \"/models/a\" } ... }), serving several models");
ABSL_FLAG(int32_t, file_system_poll_wait_seconds, 1,
          "serve: how often base paths are polled for new and removed versions (0: once, at the "
          "start)");
ABSL_FLAG(std::string, request_log, "stderr",
          "serve: a line per request (time, method, target, status, bytes in and out, latency in "
          "ms) to stderr, to a file (appended), or off");
ABSL_FLAG(std::string, input, "", "predict: the JSON lines file of instances ('-': stdin)");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "serve, ps: the address to listen on (127.0.0.1: this machine only; 0.0.0.0: all)");
ABSL_FLAG(int, port, 8501, "serve, ps: the port to listen on (0: any free port, printed)");
ABSL_FLAG(int32_t, task, 0, "ps: this node's index in the cluster spec's \"ps\" list");
ABSL_FLAG(bool, standby, false,
          "ps: start as a standby that a coordinator adopts in place of a lost PS (no --task)");
ABSL_FLAG(int32_t, threads, 0,
          "ps: scheduler threads (0: one per core; 1 when several nodes share a small machine); "
          "serve: threads answering requests (0: one per core)");
ABSL_FLAG(std::string, tls_cert, "", "ps: this node's certificate (PEM), for mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "ps: this node's private key (PEM)");
ABSL_FLAG(std::string, tls_ca, "", "ps: the cluster CA's certificate (PEM); peers must be signed by it");
ABSL_FLAG(uint64_t, max_message_bytes, tessera::kDefaultMaxMessageBytes,
          "ps: the largest message a peer may send (a whole shard read or assigned at once, a "
          "batch's rows or gradients for this node); a larger one closes its connection");
ABSL_FLAG(std::string, name, "",
          "serve: the model's name in URLs (default: the export's own with --model, the base "
          "path's last directory with --model_base_path)");
ABSL_FLAG(bool, verify, false,
          "inspect: read an exported model's values and verify every checksum (serving verifies "
          "them as it reads them)");
ABSL_FLAG(int64_t, max_body_bytes, int64_t{64} << 20,
          "serve: the largest request body taken; a larger one is answered 413 unread");
ABSL_FLAG(int64_t, max_instances, 10'000,
          "serve: the most instances one :predict request may hold (more: 413)");
ABSL_FLAG(int32_t, max_connections, 1024,
          "serve: open connections at most; past it the longest idle one is closed, and when none "
          "is idle a new one is answered 503");
ABSL_FLAG(int32_t, read_timeout_ms, 30'000,
          "serve: a whole request (head and body) must arrive within this of its first byte (408)");
ABSL_FLAG(int32_t, idle_timeout_ms, 60'000,
          "serve: a keep-alive connection idle this long between requests is closed");
ABSL_FLAG(int32_t, write_timeout_ms, 30'000,
          "serve: a response the client has not taken within this is dropped with its connection");
ABSL_FLAG(std::string, log_level, "",
          "diagnostics below this level are dropped: debug, info, warning, error or off "
          "(default: $TESSERA_LOG_LEVEL, else info)");

namespace {

constexpr char kUsage[] = R"(usage: tessera <command> [flags]

commands:
  predict --model DIR --input FILE
      Predicts JSON lines of instances (FILE, or '-' for stdin), one object per line mapping
      each input to its value (an integer id, or an array of numbers), and writes one JSON line
      per instance mapping each output to its array of floats.
  serve (--model DIR | --model_base_path DIR | --model_config_file FILE) [--port 8501]
        [--host 127.0.0.1] [--name NAME] [--threads N] [--file_system_poll_wait_seconds 1]
        [--request_log stderr|off|FILE]
        [--max_body_bytes 67108864] [--max_instances 10000] [--max_connections 1024]
        [--read_timeout_ms 30000] [--idle_timeout_ms 60000] [--write_timeout_ms 30000]
      Serves models with TensorFlow Serving's REST API until SIGINT or SIGTERM: one export
      (--model), a base path of numbered versions (--model_base_path DIR holding 1/, 2/, ...:
      the newest is served, new versions are picked up and removed ones unloaded as DIR is
      polled), or the models of a TF Serving model config file.
        POST /v1/models/NAME[/versions/N]:predict  {"instances": [...]} -> {"predictions": [...]}
                                                   {"inputs": {...}}    -> {"outputs": {...}}
        POST /v1/models/NAME[/versions/N]:classify {"examples": [...]}  -> {"results": [...]}
        POST /v1/models/NAME[/versions/N]:regress  {"examples": [...]}  -> {"results": [...]}
        GET  /v1/models/NAME[/versions/N]          the status of its versions
        GET  /v1/models/NAME[/versions/N]/metadata its signatures
      A line per request goes to --request_log. --port 0 picks a free port; the URL served on
      is printed. What one client can cost is bounded: a body over --max_body_bytes or more
      than --max_instances instances is answered 413, a request not in within
      --read_timeout_ms of its first byte 408; past --max_connections the longest idle
      connection is closed (503 when none is idle).
  ps --port P [--task K | --standby] [--host 127.0.0.1] [--threads N]
     [--tls_cert F --tls_key F --tls_ca F] [--max_message_bytes N]
      Runs parameter-server task K of a networked cluster until SIGINT or SIGTERM; with
      --standby, a PS that holds nothing until the coordinator adopts it in place of a lost one
      (list it under "ps_standby" in the cluster spec). Without TLS
      it listens on loopback unless --host says otherwise (and then anyone who can reach the
      port can read and change the model: use TLS beyond a trusted network). A peer's message
      over --max_message_bytes (1 GiB), or over 64 KiB before its version handshake, closes
      its connection.
  inspect PATH [--verify]
      Describes a checkpoint (its variables, optimizers, slots and slice files) or an exported
      model (its file format, signatures, layers and variables); --verify also reads an exported
      model's values and checks every checksum (serve and predict check them as they read them).
  help
      Prints this message.

Diagnostics go to stderr with a timestamp, a level and the process's role ("ps 1"); --log_level
(or TESSERA_LOG_LEVEL) drops those below debug, info (the default), warning or error.

Exit status: 0 on success, 2 for a bad command line, input, model or checkpoint, 1 otherwise.
)";

// 2 for what the user gave us (arguments, files, instances), 1 for everything else.
int ExitCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

absl::Status Require(const std::string& value, const char* flag) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string("needs --") + flag);
}

// absl warns "Did you really mean to set flag 'input' to the value '-'?" for `--input -`, the
// usual spelling of "read stdin"; joining the pair into `--input=-` keeps it quiet.
std::vector<char*> JoinStdinInput(int argc, char** argv) {
  static char kInputStdin[] = "--input=-";
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--input" || arg == "-input") && i + 1 < argc && std::string(argv[i + 1]) == "-") {
      args.push_back(kInputStdin);
      ++i;
    } else {
      args.push_back(argv[i]);
    }
  }
  return args;
}

absl::Status Run(const std::string& command, const std::vector<std::string>& args) {
  if (const std::string level = absl::GetFlag(FLAGS_log_level); !level.empty()) {
    absl::StatusOr<tessera::LogLevel> parsed = tessera::ParseLogLevel(level);
    if (!parsed.ok()) return parsed.status();
    tessera::SetLogLevel(*parsed);
  }
  const auto no_arguments = [&]() {
    if (args.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError("unexpected argument '" + args[0] + "'");
  };
  if (command == "predict") {
    if (absl::Status s = no_arguments(); !s.ok()) return s;
    const std::string model = absl::GetFlag(FLAGS_model);
    const std::string input = absl::GetFlag(FLAGS_input);
    if (absl::Status s = Require(model, "model"); !s.ok()) return s;
    if (absl::Status s = Require(input, "input"); !s.ok()) return s;
    return tessera::cli::RunPredict(model, input, std::cout);
  }
  if (command == "serve") {
    if (absl::Status s = no_arguments(); !s.ok()) return s;
    tessera::cli::ServeOptions options;
    options.model_dir = absl::GetFlag(FLAGS_model);
    options.model_base_path = absl::GetFlag(FLAGS_model_base_path);
    options.model_config_file = absl::GetFlag(FLAGS_model_config_file);
    options.file_system_poll_wait_seconds = absl::GetFlag(FLAGS_file_system_poll_wait_seconds);
    options.request_log = absl::GetFlag(FLAGS_request_log);
    options.host = absl::GetFlag(FLAGS_host);
    options.port = absl::GetFlag(FLAGS_port);
    options.name = absl::GetFlag(FLAGS_name);
    options.threads = absl::GetFlag(FLAGS_threads);
    options.max_body_bytes = absl::GetFlag(FLAGS_max_body_bytes);
    options.max_instances = absl::GetFlag(FLAGS_max_instances);
    options.max_connections = absl::GetFlag(FLAGS_max_connections);
    options.read_timeout_ms = absl::GetFlag(FLAGS_read_timeout_ms);
    options.idle_timeout_ms = absl::GetFlag(FLAGS_idle_timeout_ms);
    options.write_timeout_ms = absl::GetFlag(FLAGS_write_timeout_ms);
    return tessera::cli::RunServe(options, std::cout);
  }
  if (command == "ps") {
    if (absl::Status s = no_arguments(); !s.ok()) return s;
    tessera::cli::PsOptions options;
    options.port = absl::GetFlag(FLAGS_port);
    options.task = absl::GetFlag(FLAGS_task);
    options.standby = absl::GetFlag(FLAGS_standby);
    options.threads = absl::GetFlag(FLAGS_threads);
    options.network.bind = absl::GetFlag(FLAGS_host);
    options.network.tls_cert = absl::GetFlag(FLAGS_tls_cert);
    options.network.tls_key = absl::GetFlag(FLAGS_tls_key);
    options.network.tls_ca = absl::GetFlag(FLAGS_tls_ca);
    options.network.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
    return tessera::cli::RunPs(options, std::cout);
  }
  if (command == "inspect") {
    if (args.size() != 1) return absl::InvalidArgumentError("inspect needs exactly one PATH");
    return tessera::cli::RunInspect(args[0], std::cout, absl::GetFlag(FLAGS_verify));
  }
  return absl::InvalidArgumentError("unknown command '" + command + "'; see 'tessera help'");
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // --help lists the flags of this file (absl's default looks for a file named after the binary).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "cli/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  std::vector<char*> args = JoinStdinInput(argc, argv);
  const std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (positional.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = positional[1];
  if (command == "help") {
    std::cout << kUsage;
    return 0;
  }
  const std::vector<std::string> arguments(positional.begin() + 2, positional.end());
  const absl::Status status = Run(command, arguments);
  if (!status.ok()) {
    std::cerr << "tessera " << command << ": " << status.message() << "\n";
    if (absl::StartsWith(status.message(), "needs --")) std::cerr << "see 'tessera help'\n";
  }
  return ExitCode(status);
}
