// WriteCriteoData (criteo_data.h): the train and test files drawn from the planted model
// (planted_criteo_model.cc), written plain or gzip'd under temporary names, and the JSON sidecar
// with the Bayes-optimal figures.
#include "workloads/criteo_data.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/base/random.h"
#include "core/training/metrics.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Philox streams of one seed (stream 0 calibrates the planted model: planted_criteo_model.cc).
constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kTestStream = 2;
constexpr int64_t kMaxTestExamples = int64_t{1} << 27;
constexpr size_t kFlushBytes = size_t{1} << 20;
constexpr absl::Duration kProgressEvery = absl::Seconds(3);

// A data file written plain or gzip'd, under `path`.tmp until Finish renames it to `path`.
// Bytes are buffered and written in ~1 MiB pieces.
class DataFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<DataFileWriter>> Open(Env& env, std::string path,
                                                              bool gzip) {
    std::string temporary = absl::StrCat(path, ".tmp");
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env.NewWritableFile(temporary));
    auto writer = std::unique_ptr<DataFileWriter>(
        new DataFileWriter(env, std::move(path), std::move(temporary), std::move(file)));
    if (gzip) {
      writer->deflating_ = true;
      // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
      if (deflateInit2(&writer->stream_, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8,
                       Z_DEFAULT_STRATEGY) != Z_OK) {
        writer->deflating_ = false;
        return absl::ResourceExhaustedError("zlib: cannot start a deflate stream");
      }
    }
    return writer;
  }

  ~DataFileWriter() {
    if (deflating_) deflateEnd(&stream_);
  }

  // Writes `text` (consumed: cleared on return).
  absl::Status Write(std::string& text) {
    if (!deflating_) {
      TESSERA_RETURN_IF_ERROR(file_->WriteAt(offset_, text));
      offset_ += text.size();
    } else {
      TESSERA_RETURN_IF_ERROR(Deflate(text, Z_NO_FLUSH));
    }
    text.clear();
    return absl::OkStatus();
  }

  // Writes the rest, closes the file and renames it into place.
  absl::Status Finish() {
    if (deflating_) {
      std::string none;
      TESSERA_RETURN_IF_ERROR(Deflate(none, Z_FINISH));
    }
    TESSERA_RETURN_IF_ERROR(file_->Close());
    return env_.RenameFile(temporary_, path_);
  }

 private:
  DataFileWriter(Env& env, std::string path, std::string temporary,
                 std::unique_ptr<WritableFile> file)
      : env_(env),
        path_(std::move(path)),
        temporary_(std::move(temporary)),
        file_(std::move(file)) {}

  absl::Status Deflate(const std::string& text, int flush) {
    stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    stream_.avail_in = static_cast<uInt>(text.size());
    for (;;) {
      out_.resize(kFlushBytes);
      stream_.next_out = reinterpret_cast<Bytef*>(out_.data());
      stream_.avail_out = static_cast<uInt>(out_.size());
      const int code = deflate(&stream_, flush);
      if (code == Z_STREAM_ERROR) return absl::InternalError("zlib: deflate stream error");
      out_.resize(out_.size() - stream_.avail_out);
      if (!out_.empty()) {
        TESSERA_RETURN_IF_ERROR(file_->WriteAt(offset_, out_));
        offset_ += out_.size();
      }
      // Done when deflate had room to spare: all input taken (and, finishing, the trailer out).
      if (flush == Z_FINISH ? code == Z_STREAM_END : stream_.avail_out != 0) break;
    }
    return absl::OkStatus();
  }

  Env& env_;
  std::string path_, temporary_;
  std::unique_ptr<WritableFile> file_;
  uint64_t offset_ = 0;
  bool deflating_ = false;
  z_stream stream_{};
  std::string out_;
};

struct SplitResult {
  int64_t positives = 0;
  // Test split only: the planted logit of each example (for the Bayes AUC), and sums of the
  // planted probabilities and log-losses.
  std::vector<float> logits, labels;
  double probability_sum = 0, log_loss_sum = 0;
};

absl::StatusOr<SplitResult> WriteSplit(const PlantedCriteoModel& model,
                                       const CriteoDataConfig& config, Env& env,
                                       const std::string& path, const char* name, int64_t count,
                                       uint64_t stream, bool keep_logits) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DataFileWriter> writer,
                           DataFileWriter::Open(env, path, config.gzip));
  SplitResult result;
  if (keep_logits) {
    result.logits.reserve(count);
    result.labels.reserve(count);
  }
  PhiloxStream rng(config.seed, stream);
  std::string buffer;
  buffer.reserve(kFlushBytes + 1024);
  const absl::Time start = env.Now();
  absl::Time next_report = start + kProgressEvery;
  for (int64_t e = 0; e < count; ++e) {
    const CriteoExample example = model.Draw(rng);
    result.positives += example.label;
    if (keep_logits) {
      result.logits.push_back(static_cast<float>(example.logit));
      result.labels.push_back(static_cast<float>(example.label));
      const double p = 1.0 / (1.0 + std::exp(-example.logit));  // sigmoid(logit)
      result.probability_sum += p;
      // -log(p) computed from the logit, exactly, where 1 - p would round to 0.
      const double x = example.logit;
      const double softplus = std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
      result.log_loss_sum += softplus - (example.label ? x : 0.0);
    }
    model.AppendLine(example, buffer);
    if (buffer.size() >= kFlushBytes) TESSERA_RETURN_IF_ERROR(writer->Write(buffer));
    if (config.progress != nullptr && (e & 0xffff) == 0xffff) {
      const absl::Time now = env.Now();
      if (now >= next_report) {
        next_report = now + kProgressEvery;
        *config.progress << absl::StrFormat("criteo %s: %d / %d examples (%.0f lines/s)\n", name,
                                            e + 1, count,
                                            (e + 1) / absl::ToDoubleSeconds(now - start));
        config.progress->flush();
      }
    }
  }
  TESSERA_RETURN_IF_ERROR(writer->Write(buffer));
  TESSERA_RETURN_IF_ERROR(writer->Finish());
  return result;
}

std::string JsonNumber(double x) {
  return std::isfinite(x) ? absl::StrFormat("%.6g", x) : std::string("null");
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Sidecar(const CriteoDataConfig& config, const PlantedCriteoModel& model,
                    const CriteoDataSummary& s) {
  std::vector<int64_t> vocabularies;
  for (const CriteoCategoricalFeature& f : CriteoCategoricalFeatures())
    vocabularies.push_back(f.vocabulary);
  const auto rate = [](int64_t positives, int64_t n) {
    return n > 0 ? static_cast<double>(positives) / n : std::numeric_limits<double>::quiet_NaN();
  };
  return absl::StrCat(
      "{\n  \"format\": \"criteo_tsv\",\n  \"seed\": ", config.seed,
      ",\n  \"gzip\": ", config.gzip ? "true" : "false",
      ",\n  \"train_file\": ", JsonString(s.train_path),
      ",\n  \"test_file\": ", JsonString(s.test_path),
      ",\n  \"train_examples\": ", s.train_examples, ",\n  \"test_examples\": ", s.test_examples,
      ",\n  \"train_positives\": ", s.train_positives,
      ",\n  \"test_positives\": ", s.test_positives,
      ",\n  \"train_ctr\": ", JsonNumber(rate(s.train_positives, s.train_examples)),
      ",\n  \"test_ctr\": ", JsonNumber(rate(s.test_positives, s.test_examples)),
      ",\n  \"planted_ctr\": ", JsonNumber(s.planted_ctr),
      ",\n  \"bayes_auc\": ", JsonNumber(s.bayes_auc),
      ",\n  \"bayes_log_loss\": ", JsonNumber(s.bayes_log_loss),
      ",\n  \"planted_bias\": ", JsonNumber(model.bias()),
      ",\n  \"integer_features\": ", kCriteoIntegerFeatures,
      ",\n  \"categorical_features\": ", kCriteoCategoricalFeatures, ",\n  \"vocabulary_sizes\": [",
      absl::StrJoin(vocabularies, ", "), "],\n  \"seconds\": ", JsonNumber(s.seconds), "\n}\n");
}

}  // namespace

absl::StatusOr<CriteoDataSummary> WriteCriteoData(const CriteoDataConfig& config, Env* env) {
  if (config.output_prefix.empty()) {
    return absl::InvalidArgumentError("criteo data: needs an output prefix");
  }
  if (config.num_train < 0 || config.num_test < 0 || config.num_test > kMaxTestExamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("criteo data: num_train ", config.num_train, " and num_test ", config.num_test,
                     " must be >= 0 (num_test at most ", kMaxTestExamples, ")"));
  }
  const absl::Time start = env->Now();
  TESSERA_RETURN_IF_ERROR(env->CreateDirectories(DirectoryOf(config.output_prefix)));
  const char* extension = config.gzip ? ".tsv.gz" : ".tsv";
  CriteoDataSummary summary;
  summary.train_path = absl::StrCat(config.output_prefix, ".train", extension);
  summary.test_path = absl::StrCat(config.output_prefix, ".test", extension);
  summary.sidecar_path = absl::StrCat(config.output_prefix, ".json");
  summary.train_examples = config.num_train;
  summary.test_examples = config.num_test;

  const PlantedCriteoModel model = PlantedCriteoModel::Create(config.seed);
  TESSERA_ASSIGN_OR_RETURN(const SplitResult train,
                           WriteSplit(model, config, *env, summary.train_path, "train",
                                      config.num_train, kTrainStream, /*keep_logits=*/false));
  summary.train_positives = train.positives;
  TESSERA_ASSIGN_OR_RETURN(const SplitResult test,
                           WriteSplit(model, config, *env, summary.test_path, "test",
                                      config.num_test, kTestStream, /*keep_logits=*/true));
  summary.test_positives = test.positives;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const absl::StatusOr<double> auc = Auc(test.logits, test.labels);
  summary.bayes_auc = auc.ok() ? *auc : kNaN;
  summary.planted_ctr = config.num_test > 0 ? test.probability_sum / config.num_test : kNaN;
  summary.bayes_log_loss = config.num_test > 0 ? test.log_loss_sum / config.num_test : kNaN;
  summary.seconds = absl::ToDoubleSeconds(env->Now() - start);
  TESSERA_RETURN_IF_ERROR(WriteFileAtomically(*env, summary.sidecar_path,
                                              Sidecar(config, model, summary),
                                              /*sync_directory=*/false));
  return summary;
}

}  // namespace tessera
