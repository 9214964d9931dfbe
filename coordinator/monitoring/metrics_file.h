// The --metrics_file: a training run's record as JSON lines, one object per line, each flushed as
// it is written, so that a run can be followed (tail -f) and read back while it goes or after:
//   {"kind": "interval", "step": 1200, "time": 1800000011.2, "seconds": 4.1,
//    "examples_per_sec": 48211.0, "loss": 0.6123, "queue_depth": 2, "closures_completed": 1203,
//    "worker_failures": 0}
//   {"kind": "evaluation", "step": 1000, "time": ..., "seconds": ..., "final": false,
//    "loss": 0.58, "examples": 100000, "auc": 0.74, "accuracy": 0.71}
//   {"kind": "checkpoint", "step": 2000, "time": ..., "seconds": ..., "duration_seconds": 0.8,
//    "dir": "/ckpt/ckpt-2000"}   (once written)
// (TrainingMonitor::MetricsLine; a local run's intervals carry no cluster figures). pandas reads
// it with read_json(path, lines=True).
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<MetricsFile> file, MetricsFile::Open(path));
//   monitor->SetLineSink([file](const nlohmann::json& line) { file->Write(line); });
//
// Thread-safety: Write may be called from any thread; lines are written whole.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

class MetricsFile {
 public:
  // Creates (or truncates) `path`. InvalidArgument naming --metrics_file and the path when it
  // cannot be opened for writing.
  static absl::StatusOr<std::shared_ptr<MetricsFile>> Open(const std::string& path);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  // Appends `line` (an object, written on one line) and flushes. A failed write is logged once
  // (a warning naming the file); training goes on.
  void Write(const nlohmann::json& line);

  const std::string& path() const { return path_; }

 private:
  MetricsFile(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  const std::string path_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera
