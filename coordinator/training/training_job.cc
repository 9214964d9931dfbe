#include "coordinator/training/training_job.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "coordinator/mirrored/mirrored_training.h"
#include "coordinator/monitoring/internal/run_dashboard.h"
#include "coordinator/monitoring/metrics_file.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/ps/parameter_server_training.h"
#include "coordinator/training/local_training.h"
#include "coordinator/training/training_run.h"
#include "coordinator/training/training_summary.h"
#include "coordinator/training/worker_role.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "tessera/env.h"
#include "tessera/status.h"
#include "tessera/version.h"

namespace tessera {
namespace {

// An empty training set trains nothing: refused rather than a run of 0 steps that reports an
// evaluation of the untrained model as if it had trained.
absl::Status CheckTrainingData(const Dataset& train) {
  if (train.size() > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "the training data has no examples (an empty file, or every line skipped?): nothing to "
      "train on");
}

// What `data` holds, by kind: "ids [user, item]; dense [dense [13]]" (a dense feature with
// its width).
std::string DescribeColumns(const Dataset& data) {
  std::vector<std::string> dense;
  for (const auto& [name, shape] : data.DenseFeatureShapes()) {
    dense.push_back(absl::StrCat(name, " [", shape.row_size(), "]"));
  }
  std::vector<std::string> parts;
  auto add = [&parts](absl::string_view kind, const std::vector<std::string>& names) {
    if (!names.empty()) parts.push_back(absl::StrCat(kind, " [", absl::StrJoin(names, ", "), "]"));
  };
  add("ids", data.IdFeatureNames());
  add("id_list", data.IdListFeatureNames());
  add("dense", dense);
  return parts.empty() ? std::string("no features") : absl::StrJoin(parts, "; ");
}

// Every input the model reads is a feature of `data` (`what`: "training" or "test"), of the
// input's kind (and width, dense): checked before the cluster starts, rather than failing the
// first step as "batch: missing ids feature". InvalidArgument naming the inputs that do not match
// and what the data has.
absl::Status CheckModelInputs(const ModelSpec& model, const Dataset& data, absl::string_view what) {
  if (data.size() == 0) return absl::OkStatus();
  std::map<std::string, std::string> kinds;  // feature -> its kind in the data
  for (const std::string& name : data.IdFeatureNames()) kinds[name] = "ids";
  for (const std::string& name : data.IdListFeatureNames()) kinds[name] = "id_list";
  const std::map<std::string, Shape> dense = data.DenseFeatureShapes();
  for (const auto& [name, shape] : dense) kinds[name] = "dense";
  std::vector<std::string> mismatches;
  for (const InputSpec& input : model.inputs) {
    const absl::string_view kind = InputKindName(input.kind);
    auto it = kinds.find(input.name);
    if (it == kinds.end()) {
      mismatches.push_back(absl::StrCat("'", input.name, "' (", kind, ") is not in it"));
    } else if (it->second != kind) {
      mismatches.push_back(
          absl::StrCat("'", input.name, "' is ", kind, " in the model but ", it->second, " in it"));
    } else if (input.kind == InputKind::kDense &&
               dense.at(input.name).row_size() != input.width) {
      mismatches.push_back(absl::StrCat("'", input.name, "' is dense [", input.width,
                                        "] in the model but dense [",
                                        dense.at(input.name).row_size(), "] in it"));
    }
  }
  if (mismatches.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the model '", model.name, "' reads inputs the ", what,
      " data does not provide: ", absl::StrJoin(mismatches, "; "), ". The data has ",
      DescribeColumns(data)));
}

// The labels of `data` (`what`: "training" or "test") are ones the model's loss takes: in [0, 1]
// for sigmoid_cross_entropy, class indices in [0, classes) for softmax_cross_entropy. Checked
// before the start from what the source knows (a file's index recorded its labels' range),
// rather than failing a step mid-run naming an example of a batch: InvalidArgument naming the
// label and where it is ("day.tsv:1234").
absl::Status CheckLabels(const ModelSpec& model, const Dataset& data, absl::string_view what) {
  const std::optional<LabelRange> range = data.LabelsRange();
  if (!range.has_value()) return absl::OkStatus();
  TESSERA_ASSIGN_OR_RETURN(const ResolvedGraph graph, ResolveModelSpec(model));
  auto refuse = [&](double label, const std::string& at, const std::string& takes) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " data's label ", label, " at ",
                                                   at, " is not ", takes, ", which ",
                                                   model.loss.kind, " takes"));
  };
  switch (graph.loss) {
    case LossKind::kSigmoidCrossEntropy:
      if (range->min < 0) return refuse(range->min, range->min_at, "in [0, 1]");
      if (range->max > 1) return refuse(range->max, range->max_at, "in [0, 1]");
      break;
    case LossKind::kSoftmaxCrossEntropy: {
      const int64_t classes = graph.value_widths.at(static_cast<size_t>(graph.loss_value));
      const std::string takes = absl::StrCat("a class index in [0, ", classes, ")");
      if (range->min < 0) return refuse(range->min, range->min_at, takes);
      if (range->max >= static_cast<double>(classes)) {
        return refuse(range->max, range->max_at, takes);
      }
      if (range->fraction.has_value()) return refuse(*range->fraction, range->fraction_at, takes);
      break;
    }
    case LossKind::kMeanSquaredError:
      break;  // any number (a file's are finite)
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> TrainingSteps(int64_t steps, int64_t epochs, const Dataset& train,
                                      int64_t batch_size) {
  TESSERA_RETURN_IF_ERROR(CheckTrainingData(train));
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size must be >= 1, not ", batch_size));
  }
  if (steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps must be >= 0 (0: --epochs passes), not ", steps));
  }
  if (steps > 0) return steps;
  if (epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--epochs must be >= 1, not ", epochs));
  }
  const int64_t per_epoch = BatchesPerPass(train.size(), batch_size);
  int64_t total = 0;
  if (__builtin_mul_overflow(per_epoch, epochs, &total)) {
    return absl::InvalidArgumentError(absl::StrCat("--epochs ", epochs, " of ", per_epoch,
                                                   " steps is more steps than can be counted"));
  }
  return total;
}

absl::Status ScheduleTraining(TrainingJob& job, int64_t steps, int64_t epochs) {
  TESSERA_ASSIGN_OR_RETURN(job.steps, TrainingSteps(steps, epochs, job.train, job.batch_size));
  job.epochs = steps > 0 ? 0 : epochs;
  return absl::OkStatus();
}

std::string DescribeSchedule(const TrainingJob& job) {
  if (job.epochs > 0) {
    return absl::StrCat(job.epochs, job.epochs == 1 ? " epoch" : " epochs", " of ",
                        job.train.size(), " examples in batches of ", job.batch_size);
  }
  return absl::StrCat(job.steps, " steps of ", job.batch_size);
}

namespace {

// Whether files can be made in directory `dir` (made with the directories above it when
// missing), tried in the deepest part of it that exists, leaving nothing behind. InvalidArgument
// naming `flag` otherwise.
absl::Status CheckWritableDirectory(Env& env, const char* flag, const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::string existing = dir;
  while (!env.FileExists(existing)) {
    const size_t slash = existing.find_last_of('/');
    if (slash == std::string::npos) {
      existing = ".";
      break;
    }
    existing = slash == 0 ? "/" : existing.substr(0, slash);
  }
  const std::string probe = absl::StrCat(existing, "/.tessera-write-check-", getpid());
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(probe);
  absl::Status status = file.status();
  if (file.ok()) {
    status = (*file)->Close();
    env.RemoveTree(probe).IgnoreError();
  }
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", dir, ": nothing can be written in ",
                                                 existing, " (", status.message(), ")"));
}

// Every place the run writes to is checked before its first step (a bad --export_dir would
// otherwise fail the run only at its end).
absl::Status CheckOutputs(const TrainingFlags& flags) {
  Env& env = *Env::Default();
  const ParameterServerTrainingOptions& options = flags.parameter_servers;
  TESSERA_RETURN_IF_ERROR(CheckWritableDirectory(env, "--export_dir", options.export_dir));
  TESSERA_RETURN_IF_ERROR(CheckWritableDirectory(env, "--checkpoint_dir", options.checkpoint_dir));
  if (!flags.summary.empty()) {
    const size_t slash = flags.summary.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : flags.summary.substr(0, slash + 1);
    TESSERA_RETURN_IF_ERROR(CheckWritableDirectory(env, "--summary", dir));
  }
  return absl::OkStatus();
}

const char* ModeName(TrainingMode mode) {
  switch (mode) {
    case TrainingMode::kSimulation:
      return "sim";
    case TrainingMode::kLocal:
      return "local";
    case TrainingMode::kNetworked:
      return "net";
  }
  return "unknown";
}

// The run's configuration as the monitor and the summary record it: what the job and the flags
// say, before anything runs.
nlohmann::json DescribeRun(const TrainingJob& job, const TrainingFlags& flags) {
  const ParameterServerTrainingOptions& ps = flags.parameter_servers;
  nlohmann::json parameters = nlohmann::json::array();
  int64_t total = 0;
  for (const ParamSpec& param : job.model.params) {
    parameters.push_back({{"name", param.name},
                          {"shape", param.shape.dims()},
                          {"partitioned", param.partitioned}});
    total += param.shape.num_elements();
  }
  nlohmann::json config = {
      {"workload", job.name},
      {"mode", ModeName(flags.mode)},
      {"strategy", flags.strategy == TrainingStrategy::kMirrored ? "mirrored" : "ps"},
      {"steps", job.steps},
      {"batch_size", job.batch_size},
      {"optimizer", {{"name", job.optimizer.name}, {"params", job.optimizer.params}}},
      {"seed", flags.seed},
      {"eval_every", flags.eval_every},
      {"train_examples", job.train.size()},
      {"test_examples", job.test.size()},
      {"model", {{"name", job.model.name}, {"parameters", total}, {"variables", parameters}}}};
  if (flags.mode != TrainingMode::kLocal) {
    config.update({{"ps", ps.ps},
                   {"workers", ps.workers},
                   {"closures_per_worker", ps.closures_per_worker},
                   {"partitioner", job.partitioner.description()},
                   {"checkpoint_dir", ps.checkpoint_dir},
                   {"checkpoint_every", ps.checkpoint_every},
                   {"checkpoint_every_seconds", ps.checkpoint_every_seconds},
                   {"checkpoint_in_background", ps.checkpoint_in_background},
                   {"resume", ps.resume},
                   {"inject_worker_failures", ps.inject_worker_failures}});
  }
  return config;
}

// Trains `job` as `flags` say, watched by `observers` (their monitor not null), then reports:
// the result lines, the monitor's end, the summary.
absl::Status TrainAndReport(const TrainingJob& job, const TrainingFlags& flags,
                            const RunObservers& observers) {
  TrainingMonitor* monitor = observers.monitor.get();
  const ParameterServerTrainingOptions& options = flags.parameter_servers;
  nlohmann::json summary;
  absl::StatusOr<TrainingRun> trained =
      flags.mode == TrainingMode::kLocal
          ? TrainLocally(job, flags.seed, flags.eval_every, summary, monitor)
      : flags.strategy == TrainingStrategy::kMirrored
          ? TrainMirrored(job, options, flags.on_replica_loss, flags.eval_every, summary,
                          observers)
          : TrainOnParameterServers(job, options, flags.eval_every, summary, observers);
  if (!trained.ok()) {
    monitor->Finish(trained.status());
    monitor->SetLineSink(nullptr);
    return trained.status();
  }
  const TrainingRun& run = *trained;
  std::string by_pass;
  if (run.examples_per_sec_by_pass.size() > 1) {
    by_pass = "; passes";
    for (double eps : run.examples_per_sec_by_pass)
      absl::StrAppend(&by_pass, " ", std::lround(eps));
  }
  std::printf(
      "%s: %lld examples in %.2f s (%.0f examples/s%s); final train loss (last 5%% of "
      "steps) %.4f\n",
      job.name.c_str(), static_cast<long long>(run.examples), run.wall_seconds,
      ExamplesPerSecond(run), by_pass.c_str(), run.final_loss);
  if (run.eval.has_value()) {
    monitor->RecordEvaluation(monitor->Snapshot(1).step, *run.eval, /*final=*/true);
  }
  monitor->Finish(absl::OkStatus());
  monitor->SetLineSink(nullptr);  // closes the metrics file
  RecordRun(run, job.name, summary);
  RecordMonitor(monitor->Snapshot(kSummaryPoints), summary);
  if (run.eval.has_value() && job.report) job.report(*run.eval, summary);
  if (const std::optional<int64_t> peak = PeakResidentBytes(); peak.has_value()) {
    summary["peak_rss_bytes"] = *peak;
    std::printf("%s: first step %.2f s after start; peak memory %.0f MiB\n", job.name.c_str(),
                run.startup_seconds, static_cast<double>(*peak) / (1 << 20));
  }
  return WriteSummary(flags.summary, summary);
}

}  // namespace

// Note [The run's monitor]
// A run has one TrainingMonitor, which the training loop records into and everything that shows
// the run reads: the summary (RecordMonitor, at the end), the --metrics_file (its line sink, as
// it goes) and whatever runs beside the training loop, such as a dashboard. RunTrainingJob makes
// one, unless the caller hands its own (so that it can hold it before the run starts), and hands
// it on in the RunObservers of TrainOnParameterServers (so that code started there, beside the
// coordinator, holds the same shared_ptr), or to TrainMirrored or TrainLocally.
absl::Status RunTrainingJob(const TrainingJob& job, const TrainingFlags& flags) {
  return RunTrainingJob(job, flags, std::make_shared<TrainingMonitor>());
}

absl::Status RunTrainingJob(const TrainingJob& job, const TrainingFlags& flags,
                            std::shared_ptr<TrainingMonitor> monitor) {
  const bool worker = flags.mode == TrainingMode::kNetworked && flags.role == TrainingRole::kWorker;
  SetLogRole(worker ? absl::StrCat("worker ", flags.task) : std::string("coordinator"));
  Log().info("{} starts as the {} ({} mode), {}", job.name,
             worker ? absl::StrCat("worker ", flags.task) : std::string("coordinator"),
             ModeName(flags.mode), VersionLine());
  TESSERA_RETURN_IF_ERROR(CheckTrainingData(job.train));
  TESSERA_RETURN_IF_ERROR(CheckModelInputs(job.model, job.train, "training"));
  TESSERA_RETURN_IF_ERROR(CheckModelInputs(job.model, job.test, "test"));
  TESSERA_RETURN_IF_ERROR(CheckLabels(job.model, job.train, "training"));
  TESSERA_RETURN_IF_ERROR(CheckLabels(job.model, job.test, "test"));
  if (flags.mode == TrainingMode::kNetworked && flags.role == TrainingRole::kWorker) {
    if (flags.strategy == TrainingStrategy::kMirrored) {
      return ServeAsReplica(job, flags.parameter_servers, flags.task);
    }
    return ServeAsWorker(job, flags.parameter_servers, flags.task);
  }
  TESSERA_RETURN_IF_ERROR(CheckOutputs(flags));
  RunObservers observers;
  observers.monitor = monitor;
  monitor->SetConfiguration(DescribeRun(job, flags));
  if (!flags.metrics_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<MetricsFile> file,
                             MetricsFile::Open(flags.metrics_file));
    monitor->SetLineSink([file](const nlohmann::json& line) { file->Write(line); });
  }
  std::unique_ptr<internal::RunDashboard> dashboard;
  if (flags.dashboard.has_value()) {
    TESSERA_ASSIGN_OR_RETURN(dashboard, internal::RunDashboard::Start(*flags.dashboard, monitor));
    observers.on_cluster = dashboard->ClusterHook();
    observers.on_replicas = dashboard->ReplicasHook();
    std::printf("%s: dashboard at %s\n", job.name.c_str(), dashboard->url().c_str());
    std::fflush(stdout);
  }
  const absl::Status status = TrainAndReport(job, flags, observers);
  if (dashboard != nullptr && flags.dashboard_keep_serving) {
    if (!status.ok()) std::fprintf(stderr, "%s: %s\n", job.name.c_str(), status.ToString().c_str());
    dashboard->KeepServingUntilSignal(job.name);
  }
  return status;
}

}  // namespace tessera
