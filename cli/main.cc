// The `tessera` binary: parses the command line and runs a command of cli/internal/, following the
// conventions of tessera/command_line.h (--help, --flagfile, exit status 0 / 2 / 1).
//
//   $ tessera help                          # the commands, and every flag
//   $ tessera serve --help                  # one command's usage and flags
//   $ tessera serve --model /tmp/model      # serves until SIGINT or SIGTERM
//   $ tessera generate criteo --out /tmp/c  # a synthetic Criteo-layout data set
#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/generate_command.h"
#include "cli/inspect_command.h"
#include "cli/plot_command.h"
#include "cli/predict_command.h"
#include "cli/ps_command.h"
#include "cli/serve_command.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "tessera/cluster.h"
#include "tessera/command_line.h"
#include "tessera/env.h"
#include "tessera/status.h"

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
ABSL_FLAG(std::optional<int>, port, std::nullopt,
          "serve, ps: the port to listen on (0: any free port, printed); default: serve 8501 "
          "(TF Serving's REST port), ps its address in --cluster_spec or TF_CONFIG, else 7733");
ABSL_FLAG(std::optional<int>, metrics_port, std::nullopt,
          "ps: serve Prometheus metrics (the node's shards: rows, bytes, updates, versions; its "
          "memory) at http://--metrics_host:PORT/metrics (0: any free port, printed); default: "
          "none");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "ps: the address the metrics page listens on (127.0.0.1: this machine only)");
ABSL_FLAG(std::string, cluster_spec, "",
          "ps: the cluster spec file of the training programs: this PS listens on the port of its "
          "address there, and takes the file's \"task\" if it has one; without it, the TF_CONFIG "
          "environment variable is read");
ABSL_FLAG(std::optional<int32_t>, task, std::nullopt,
          "ps: this node's index in the cluster's \"ps\" list; default: the task of "
          "--cluster_spec or TF_CONFIG, else 0");
ABSL_FLAG(bool, standby, false,
          "ps: start as a standby that a coordinator adopts in place of a lost PS (no --task)");
ABSL_FLAG(double, shard_lease_s, 30,
          "ps: how long the shards of a coordinator that went silent or away are kept for it to "
          "come back and reclaim them (0: dropped at once)");
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
ABSL_FLAG(std::string, out, "",
          "plot: the SVG to write (default: the metrics file's name with .svg); generate: the "
          "output prefix (PREFIX.train.tsv, PREFIX.test.tsv, PREFIX.json)");
ABSL_FLAG(int64_t, train_examples, 2'000'000, "generate: the training examples to write");
ABSL_FLAG(int64_t, test_examples, 200'000, "generate: the test examples to write");
ABSL_FLAG(bool, gzip, false, "generate: gzip the data files (.tsv.gz)");
ABSL_FLAG(uint64_t, seed, 1,
          "generate: the planted model's and the examples' seed (the files are a pure function "
          "of it and the sizes)");
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

// One command: its synopsis, what it does, and the flags it reads.
struct Command {
  const char* name;
  const char* synopsis;
  const char* about;
  std::vector<std::string> flags;
};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"predict",
       "tessera predict --model DIR --input FILE",
       R"(Predicts JSON lines of instances (FILE, or '-' for stdin) with the model's serving_default
signature and writes one JSON line per instance to stdout. An instance is one object mapping
each of the model's inputs to its value: an integer id for an ids input, an array of numbers (the
input's width) for a dense one; with exactly one input the bare value is accepted too. `tessera
inspect DIR` lists the inputs. A prediction maps each output to its row of floats:
  input   {"user": 7, "item": 3}
  output  {"logits":[0.31],"probability":[0.577]}
Blank lines are skipped. Every line is checked before anything is written: a bad one ends the
run with exit status 2, naming its line number, and no prediction is written.
)",
       {"model", "input", "log_level"}},
      {"serve",
       "tessera serve (--model DIR | --model_base_path DIR | --model_config_file FILE) [flags]",
       R"(Serves models with TensorFlow Serving's REST API until SIGINT or SIGTERM: one export
(--model), a base path of numbered versions (--model_base_path DIR holding 1/, 2/, ...: the
newest is served, new versions are picked up and removed ones unloaded as DIR is polled every
--file_system_poll_wait_seconds), or the models of a TF Serving model config file.
  POST /v1/models/NAME[/versions/N]:predict  {"instances": [...]} -> {"predictions": [...]}
                                             {"inputs": {...}}    -> {"outputs": {...}}
  POST /v1/models/NAME[/versions/N]:classify {"examples": [...]}  -> {"results": [...]}
  POST /v1/models/NAME[/versions/N]:regress  {"examples": [...]}  -> {"results": [...]}
  GET  /v1/models/NAME[/versions/N]          the status of its versions
  GET  /v1/models/NAME[/versions/N]/metadata its signatures
  GET  /monitoring/prometheus/metrics        requests, latencies and versions, for Prometheus
A line per request goes to --request_log. --port 0 picks a free port; the URL served on is
printed. What one client can cost is bounded: a body over --max_body_bytes or more than
--max_instances instances is answered 413, a request not in within --read_timeout_ms of its
first byte 408; past --max_connections the longest idle connection is closed (503 when none is
idle).
)",
       {"model", "model_base_path", "model_config_file", "file_system_poll_wait_seconds",
        "request_log", "port", "host", "name", "threads", "max_body_bytes", "max_instances",
        "max_connections", "read_timeout_ms", "idle_timeout_ms", "write_timeout_ms", "log_level"}},
      {"ps",
       "tessera ps [--task K | --standby] [flags]",
       R"(Runs parameter-server task K of a networked cluster until SIGINT or SIGTERM; with
--standby, a PS that holds nothing until the coordinator adopts it in place of a lost one (list
it under "ps_standby" in the cluster). Its task and port come from --task / --standby and --port,
else from its task in --cluster_spec or the TF_CONFIG environment variable ({"type": "ps",
"index": K}: it listens on the port of the cluster's "ps"[K]), else task 0 on port 7733.
Without TLS it listens on loopback unless --host says otherwise (and then anyone who can reach
the port can read and change the model: use TLS beyond a trusted network). A peer's message
over --max_message_bytes (1 GiB), or over 64 KiB before its version handshake, closes its
connection. With --metrics_port, Prometheus metrics of the node's shards (tessera_ps_shards,
tessera_ps_bytes; per shard, labelled {variable, shard}: tessera_ps_shard_rows,
tessera_ps_shard_bytes, tessera_ps_shard_updates_total, tessera_ps_shard_version) and
process_resident_memory_bytes are served at GET /metrics (and /monitoring/prometheus/metrics) on
--metrics_host (loopback by default); its URL is printed.
A coordinator that goes silent (a stopped or stalled process) or away leaves its shards here for
--shard_lease_s (30 s): back within it, the coordinator reclaims them as they are; after it they
are dropped (a coordinator started again with --resume restores the checkpoint).
)",
       {"task", "standby", "port", "cluster_spec", "host", "threads", "shard_lease_s",
        "metrics_port", "metrics_host", "tls_cert", "tls_key", "tls_ca", "max_message_bytes",
        "log_level"}},
      {"inspect",
       "tessera inspect PATH [--verify]",
       R"(Describes a checkpoint (its variables, optimizers, slots and slice files) or an exported
model (its file format, signatures, inputs, layers and variables); --verify also reads an
exported model's values and checks every checksum (serve and predict check them as they read
them).
)",
       {"verify", "log_level"}},
      {"plot",
       "tessera plot METRICS_FILE [--out FILE.svg]",
       R"(Draws a run's training curves from its --metrics_file (the JSON lines a training program
writes with --metrics_file): the training loss and examples per second of every interval, and the
loss, AUC or accuracy of every validation, each against the global step, as one self-contained
SVG (default: the metrics file's name with .svg).
)",
       {"out", "log_level"}},
      {"generate",
       "tessera generate criteo --out PREFIX [--train_examples N] [--test_examples M] [--gzip] "
       "[--seed S]",
       R"(Writes a synthetic click log in the layout of Criteo's display advertising data:
PREFIX.train.tsv and PREFIX.test.tsv (.tsv.gz with --gzip), one example a line, tab-separated:
the label (0/1), 13 integer features and 26 categorical ones (8 hex characters), any of them
empty when missing. The labels come from a planted model (per-feature effects of the integer
fields' log1p and of every categorical value, plus dot products of latent vectors of a few
categorical features) with a click rate of about 25%; PREFIX.json holds the counts, the seed,
the click rates and the Bayes-optimal AUC and log-loss of the test examples (what the true
probabilities score: no model can do better). The files are a pure function of --seed and the
sizes; a progress line is printed every few seconds.
)",
       {"out", "train_examples", "test_examples", "gzip", "seed", "log_level"}},
  };
  return *commands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& command : Commands()) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

// `tessera help` and `tessera --help`: every command, and every flag under its first command.
tessera::ProgramHelp GlobalHelp() {
  tessera::ProgramHelp help;
  help.name = "tessera";
  help.usage = "tessera <command> [flags]";
  help.about = "commands:\n";
  std::map<std::string, int> uses;  // how many commands read each flag
  for (const Command& command : Commands()) {
    absl::StrAppend(&help.about, "  ", command.synopsis, "\n");
    for (const std::string& flag : command.flags) ++uses[flag];
  }
  tessera::FlagGroup shared;
  shared.title = "Flags of several commands";
  for (const Command& command : Commands()) {
    for (const std::string& flag : command.flags) {
      if (uses[flag] > 1 &&
          std::find(shared.flags.begin(), shared.flags.end(), flag) == shared.flags.end()) {
        shared.flags.push_back(flag);
      }
    }
  }
  help.groups.push_back(shared);
  for (const Command& command : Commands()) {
    help.groups.push_back({absl::StrCat("Flags of ", command.name), command.flags});
  }
  absl::StrAppend(&help.about, R"(  tessera help [COMMAND]

'tessera COMMAND --help' (or 'tessera help COMMAND') describes one command and its flags.

Diagnostics go to stderr with a timestamp, a level and the process's role ("ps 1"); --log_level
(or TESSERA_LOG_LEVEL) drops those below debug, info (the default), warning or error.
)");
  help.list_ungrouped = false;
  return help;
}

tessera::ProgramHelp CommandHelp(const Command& command) {
  tessera::ProgramHelp help;
  help.name = absl::StrCat("tessera ", command.name);
  help.usage = command.synopsis;
  help.about = command.about;
  help.groups.push_back({"Flags", command.flags});
  help.list_ungrouped = false;
  return help;
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

absl::Status RunPsCommand() {
  tessera::cli::PsOptions options;
  TESSERA_ASSIGN_OR_RETURN(const tessera::ClusterConfig config,
                           tessera::ResolveClusterConfig({absl::GetFlag(FLAGS_cluster_spec),
                                                          tessera::TfConfigFromEnvironment()}));
  TESSERA_RETURN_IF_ERROR(tessera::cli::ResolvePsIdentity(
      {absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_task), absl::GetFlag(FLAGS_standby)}, config,
      options));
  options.threads = absl::GetFlag(FLAGS_threads);
  const double lease_s = absl::GetFlag(FLAGS_shard_lease_s);
  if (!(lease_s >= 0 && lease_s <= 1e6)) {  // NaN too
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_lease_s=", lease_s, " must be between 0 and 1e6 seconds"));
  }
  options.shard_lease = absl::Seconds(lease_s);
  options.network.bind = absl::GetFlag(FLAGS_host);
  options.network.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.network.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.network.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.network.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  return tessera::cli::RunPs(options, std::cout);
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
    TESSERA_RETURN_IF_ERROR(no_arguments());
    const std::string model = absl::GetFlag(FLAGS_model);
    const std::string input = absl::GetFlag(FLAGS_input);
    TESSERA_RETURN_IF_ERROR(Require(model, "model"));
    TESSERA_RETURN_IF_ERROR(Require(input, "input"));
    return tessera::cli::RunPredict(model, input, std::cout);
  }
  if (command == "serve") {
    TESSERA_RETURN_IF_ERROR(no_arguments());
    tessera::cli::ServeOptions options;
    options.model_dir = absl::GetFlag(FLAGS_model);
    options.model_base_path = absl::GetFlag(FLAGS_model_base_path);
    options.model_config_file = absl::GetFlag(FLAGS_model_config_file);
    options.file_system_poll_wait_seconds = absl::GetFlag(FLAGS_file_system_poll_wait_seconds);
    options.request_log = absl::GetFlag(FLAGS_request_log);
    options.host = absl::GetFlag(FLAGS_host);
    options.port = absl::GetFlag(FLAGS_port).value_or(options.port);
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
    TESSERA_RETURN_IF_ERROR(no_arguments());
    return RunPsCommand();
  }
  if (command == "plot") {
    if (args.size() != 1) return absl::InvalidArgumentError("plot needs exactly one METRICS_FILE");
    return tessera::cli::RunPlot(args[0], absl::GetFlag(FLAGS_out), std::cout);
  }
  if (command == "generate") {
    if (args.size() != 1) {
      return absl::InvalidArgumentError("generate needs exactly one data set name (criteo)");
    }
    tessera::cli::GenerateOptions options;
    options.kind = args[0];
    options.train_examples = absl::GetFlag(FLAGS_train_examples);
    options.test_examples = absl::GetFlag(FLAGS_test_examples);
    options.out = absl::GetFlag(FLAGS_out);
    options.gzip = absl::GetFlag(FLAGS_gzip);
    options.seed = absl::GetFlag(FLAGS_seed);
    TESSERA_RETURN_IF_ERROR(Require(options.out, "out"));
    return tessera::cli::RunGenerate(options, tessera::Env::Default(), std::cout);
  }
  if (command == "inspect") {
    if (args.size() != 1) return absl::InvalidArgumentError("inspect needs exactly one PATH");
    return tessera::cli::RunInspect(args[0], std::cout, absl::GetFlag(FLAGS_verify));
  }
  return absl::InvalidArgumentError("unknown command '" + command + "'; see 'tessera help'");
}

}  // namespace

int main(int argc, char** argv) {
  // `tessera serve`'s handler threads allocate at once: glibc's arenas (core/base/process.h).
  tessera::UseTensorMallocPolicy(tessera::MallocArenas::kPerThread);
  std::vector<char*> args = JoinStdinInput(argc, argv);
  const tessera::CommandLine line =
      tessera::ParseCommandLine(static_cast<int>(args.size()), args.data());
  const std::vector<std::string>& positional = line.arguments;
  // `tessera help [COMMAND]`, `tessera [COMMAND] --help`.
  const bool help_command = !positional.empty() && positional[0] == "help";
  if (line.help || help_command) {
    const size_t at = help_command ? 1 : 0;
    if (positional.size() <= at) {
      std::cout << tessera::FormatHelp(GlobalHelp());
      return 0;
    }
    const Command* command = FindCommand(positional[at]);
    if (command == nullptr) {
      std::cerr << "tessera: unknown command '" << positional[at] << "'; see 'tessera help'\n";
      return 2;
    }
    std::cout << tessera::FormatHelp(CommandHelp(*command));
    return 0;
  }
  if (positional.empty()) {
    std::cerr << tessera::FormatHelp(GlobalHelp());
    return 2;
  }
  const std::string& command = positional[0];
  const std::vector<std::string> arguments(positional.begin() + 1, positional.end());
  const absl::Status status = Run(command, arguments);
  if (!status.ok()) {
    std::cerr << "tessera " << command << ": " << status.message() << "\n";
    if (absl::StartsWith(status.message(), "needs --")) {
      std::cerr << "see 'tessera " << command << " --help'\n";
    }
  }
  return tessera::ExitCode(status);
}
