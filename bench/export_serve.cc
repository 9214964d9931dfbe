// export_serve: streaming export throughput against a plain sequential write of the same bytes,
// and serving from the memory-mapped export — time to open and answer the first prediction, and
// the resident memory after N predictions — in one run.
//
//   export_serve                           # recsys 600k x 1000 users + 60k x 1000 items: 2.64 GB
//   export_serve --users=100000 --dir=/path/on/another/disk --keep
//   export_serve --users=250000 --shards=4 # exported by ExportModel from an in-process strategy
//
// Export = WriteExportedModel from a row source handing out rows of a prepared buffer (so the
// figure is the writer's: message, per-piece CRC-32C, the NaN check, 4 MiB writes, fsync,
// rename); baseline = the same number of bytes written plainly, write(2) through the page cache in
// 4 MiB calls, then fsync. Neither ever holds more than a few MiB. Serving: the export's pages are
// dropped from the page cache first (posix_fadvise DONTNEED), then OpenExportedModel +
// Predictor::Create + one prediction (cold), then N single-example predictions of random users;
// VmRSS (RssAnon + RssFile) is read from /proc/self/status before and after. The last line is one
// JSON object with every figure.
//
// With --shards=N the export is ExportModel's instead: the model's variables live on 2 in-process
// PS (N shards per table, initialized there), and the figure to watch is the peak RSS the export
// adds to the process (VmHWM, reset just before it, minus VmRSS then): what the coordinator holds
// while streaming. Mind that the shards themselves are in this process (keep --users modest).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/internal/bench_main.h"
#include "cluster/base/cluster.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/serving/export.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "tessera/env.h"
#include "tessera/partitioner.h"
#include "tessera/status.h"
#include "tessera/workloads/reference_models.h"

ABSL_FLAG(int64_t, users, 600000, "rows of the user embedding");
ABSL_FLAG(int64_t, items, 60000, "rows of the item embedding");
ABSL_FLAG(int64_t, dim, 1000, "embedding dimension");
ABSL_FLAG(int64_t, predictions, 1000, "single-example predictions after the first");
ABSL_FLAG(std::string, dir, "/tmp/tessera_export_serve", "scratch directory");
ABSL_FLAG(bool, keep, false, "keep the export (and reuse one already there) instead of rewriting");
ABSL_FLAG(int64_t, shards, 0,
          "export with ExportModel from an in-process strategy with this many shards per table "
          "(0: from a prepared buffer)");

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Rows of a prepared 4 MiB buffer of finite values, whatever the variable: the cost of producing
// rows is not the writer's.
class BufferRows final : public VariableRowSource {
 public:
  BufferRows() : buffer_((size_t{4} << 20) / sizeof(float)) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-0.05f, 0.05f);
    for (float& v : buffer_) v = value(rng);
  }
  absl::StatusOr<ConstTensorView> Rows(const std::string& name, int64_t begin,
                                       int64_t end) override {
    const Shape& shape = shapes_.at(name);
    const Shape block = shape.rank() == 0 ? shape : shape.WithRows(end - begin);
    if (static_cast<size_t>(block.num_elements()) > buffer_.size()) {
      return absl::InternalError("a range larger than the buffer");
    }
    return ConstTensorView(buffer_.data(), block);
  }
  std::map<std::string, Shape> shapes_;

 private:
  std::vector<float> buffer_;
};

// VmRSS, RssAnon, RssFile and VmHWM (the peak) of this process, in MiB.
Json Rss() {
  std::ifstream status("/proc/self/status");
  Json out;
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (status >> key) {
    if (key == "VmRSS:" || key == "RssAnon:" || key == "RssFile:" || key == "VmHWM:") {
      status >> kib >> unit;
      out[key.substr(0, key.size() - 1)] = static_cast<double>(kib) / 1024.0;
    }
  }
  return out;
}

// What a plain program does: write(2) through the page cache, then fsync, outside the Env.
absl::StatusOr<double> PlainWrite(const std::string& path, uint64_t bytes) {
  const std::vector<char> buffer(size_t{4} << 20, 1);
  const Clock::time_point start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("creating ", path));
  for (uint64_t at = 0; at < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), bytes - at));
    const ssize_t written = ::write(fd, buffer.data(), n);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      const int error = errno;
      ::close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("writing ", path));
    }
    at += static_cast<uint64_t>(written);
  }
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) return absl::ErrnoToStatus(error, absl::StrCat("syncing ", path));
  return Seconds(start);
}

void DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

absl::Status Run() {
  RecsysModelOptions options;
  options.num_users = absl::GetFlag(FLAGS_users);
  options.num_items = absl::GetFlag(FLAGS_items);
  options.embedding_dim = absl::GetFlag(FLAGS_dim);
  options.hidden_units = 64;
  TESSERA_ASSIGN_OR_RETURN(const ModelSpec spec, RecsysModelSpec(options));
  ModelDescription description;
  description.spec = spec;
  TESSERA_ASSIGN_OR_RETURN(Signature serving, ServingSignature(spec));
  description.signatures = {std::move(serving)};
  description.step = 1;
  BufferRows rows;
  for (const ParamSpec& p : spec.params) rows.shapes_.emplace(p.name, p.shape);

  const std::string dir = absl::GetFlag(FLAGS_dir);
  const std::string model_path = absl::StrCat(dir, "/", kModelFile);
  TESSERA_RETURN_IF_ERROR(Env::Default()->CreateDirectories(dir));
  Json result;
  result["users"] = options.num_users;
  result["items"] = options.num_items;
  result["dim"] = options.embedding_dim;

  const bool reuse = absl::GetFlag(FLAGS_keep) && fs::exists(model_path);
  const int64_t shards = absl::GetFlag(FLAGS_shards);
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
  std::shared_ptr<const Model> model;
  if (!reuse && shards > 0) {
    ClusterOptions cluster_options;
    cluster_options.num_ps = 2;
    TESSERA_ASSIGN_OR_RETURN(cluster, Cluster::StartInProcess(cluster_options));
    TESSERA_ASSIGN_OR_RETURN(Partitioner partitioner, FixedShardsPartitioner(shards));
    strategy = std::make_unique<ParameterServerStrategy>(*cluster, partitioner);
    TESSERA_ASSIGN_OR_RETURN(Model created, Model::Create(spec));
    model = std::make_shared<const Model>(std::move(created));
    TESSERA_RETURN_IF_ERROR(
        strategy->CreateModelVariables(model, {"sgd", {{"learning_rate", 0.1}}}).status());
    result["shards"] = shards;
  }
  if (!reuse) {
    // The peak from here on is what the export adds (/proc/self/clear_refs 5 resets VmHWM).
    std::ofstream("/proc/self/clear_refs") << "5";
    const Json before = Rss();
    const Clock::time_point start = Clock::now();
    if (strategy != nullptr) {
      TESSERA_RETURN_IF_ERROR(ExportModel(*strategy, *model, dir, 1));
    } else {
      TESSERA_RETURN_IF_ERROR(WriteExportedModel(dir, description, rows));
    }
    const double export_s = Seconds(start);
    const Json after = Rss();
    result["export_peak_extra_rss_mib"] =
        after["VmHWM"].get<double>() - before["VmRSS"].get<double>();
    const uint64_t bytes = fs::file_size(model_path);
    TESSERA_ASSIGN_OR_RETURN(const double plain_s, PlainWrite(dir + "/plain.bin", bytes));
    fs::remove(dir + "/plain.bin");
    result["file_gb"] = static_cast<double>(bytes) / 1e9;
    result["export_s"] = export_s;
    result["export_gb_per_s"] = static_cast<double>(bytes) / 1e9 / export_s;
    result["plain_write_s"] = plain_s;
    result["plain_write_gb_per_s"] = static_cast<double>(bytes) / 1e9 / plain_s;
    result["export_ratio"] = plain_s / export_s;
    result["rss_after_export_mib"] = Rss();
    std::printf(
        "export: %.2f GB in %.2f s (%.2f GB/s); plain write of the same bytes %.2f s "
        "(%.2f GB/s)\n",
        static_cast<double>(bytes) / 1e9, export_s, static_cast<double>(bytes) / 1e9 / export_s,
        plain_s, static_cast<double>(bytes) / 1e9 / plain_s);
  }

  DropFromPageCache(model_path);
  result["rss_before_open_mib"] = Rss();
  const Clock::time_point open_start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(OpenedModel opened, OpenExportedModel(dir));
  const double open_s = Seconds(open_start);
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<Predictor> predictor,
      Predictor::Create(std::move(opened.description), std::move(opened.variables)));
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> user(0, options.num_users - 1);
  std::uniform_int_distribution<int64_t> item(0, options.num_items - 1);
  auto predict_one = [&]() -> absl::Status {
    Batch batch;
    batch.size = 1;
    batch.ids["user"] = {user(rng)};
    batch.ids["item"] = {item(rng)};
    return predictor->Predict(batch).status();
  };
  TESSERA_RETURN_IF_ERROR(predict_one());
  const double first_s = Seconds(open_start);
  result["open_s"] = open_s;
  result["open_and_first_prediction_s"] = first_s;
  const int64_t n = absl::GetFlag(FLAGS_predictions);
  const Clock::time_point predict_start = Clock::now();
  for (int64_t i = 0; i < n; ++i) TESSERA_RETURN_IF_ERROR(predict_one());
  const double predict_s = Seconds(predict_start);
  result["predictions"] = n;
  result["predictions_s"] = predict_s;
  result["rss_after_predictions_mib"] = Rss();
  std::printf("open %.4f s, open + first prediction (cold) %.4f s; %lld predictions in %.3f s\n",
              open_s, first_s, static_cast<long long>(n), predict_s);
  predictor.reset();
  strategy.reset();
  cluster.reset();
  if (!absl::GetFlag(FLAGS_keep)) fs::remove_all(dir);
  std::printf("%s\n", result.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("export_serve", argc, argv,
                              [](int, char**) { return tessera::Run(); });
}
