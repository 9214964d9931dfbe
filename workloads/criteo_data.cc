#include "workloads/criteo_data.h"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/base/hash.h"
#include "core/base/status.h"
#include "core/training/metrics.h"

namespace tessera {

// Note [The planted Criteo model]
// The model is built for a DLRM to have something to find at every level, and for its best
// possible AUC to be known:
//   - the integer features enter as log1p(I), the transform a DLRM applies to its dense input,
//     so the bottom MLP can represent the dense term exactly;
//   - every categorical value has its own effect u (a per-value bias an embedding can learn
//     given enough examples of the value: the hot values, not the long tail of the 1M-value
//     features, which stays out of reach as in real logs);
//   - six mid-sized features (C1, C2, C5, C7, C11, C13) carry latent vectors whose pairwise dot
//     products add to the logit: the term a DLRM's dot interaction is made for, and which no sum
//     of per-feature effects can express.
// Each term's spread is fixed by scaling it to a target standard deviation measured on a
// calibration sample (stream 0 of the seed), and the bias is solved so that the mean click
// probability is kBaseCtr: changing a vocabulary or a power law keeps the CTR and the difficulty.
// The spreads (0.4, 0.9, 0.8: a logit of standard deviation ~1.3) give a Bayes AUC near 0.79,
// about what the best published models reach on the real logs; a DLRM trained for one pass, with
// the 1M-value features hashed into fewer rows, stays below it.
namespace {

constexpr double kBaseCtr = 0.25;
constexpr double kDenseStddev = 0.4;
constexpr double kCategoricalStddev = 0.9;
constexpr double kInteractionStddev = 0.8;
constexpr int64_t kCalibrationExamples = 20'000;
constexpr int kLatentDim = 4;
constexpr std::array<int, 6> kInteractionFeatures = {0, 1, 4, 6, 10, 12};
// Philox streams of one seed.
constexpr uint64_t kCalibrationStream = 0;
constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kTestStream = 2;
// A value's hash slots: its name, its effect, then its latent vector.
constexpr uint64_t kNameSlot = 0;
constexpr uint64_t kEffectSlot = 1;
constexpr uint64_t kLatentSlot = 2;

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // 2^64 / the golden ratio, odd
constexpr int64_t kMaxTestExamples = int64_t{1} << 27;
constexpr size_t kFlushBytes = size_t{1} << 20;
constexpr absl::Duration kProgressEvery = absl::Seconds(3);

// Missing rates, spreads and vocabularies after the Criteo Kaggle training set's (the four
// vocabularies over 1M there are capped at 1M, which keeps a data set of a few million lines
// from being mostly unique values).
// I1 .. I13: {log_mean, log_stddev, missing_rate}.
constexpr std::array<CriteoIntegerFeature, kCriteoIntegerFeatures> kIntegerFeatures = {{
    {0.5, 1.2, 0.45},
    {1.5, 1.8, 0.0},
    {2.0, 1.4, 0.21},
    {1.8, 1.0, 0.22},
    {7.5, 1.8, 0.026},
    {3.5, 1.6, 0.22},
    {1.5, 1.5, 0.04},
    {2.5, 1.0, 0.0005},
    {3.5, 1.3, 0.04},
    {0.0, 0.8, 0.45},
    {0.8, 1.0, 0.04},
    {0.0, 1.0, 0.76},
    {1.8, 1.0, 0.22},
}};
// C1 .. C26, four a row: {vocabulary, zipf_power, missing_rate}.
constexpr std::array<CriteoCategoricalFeature, kCriteoCategoricalFeatures> kCategoricalFeatures = {{
    {1460, 3, 0.0},     {583, 3, 0.0},     {1000000, 6, 0.034}, {600000, 6, 0.034},
    {305, 2, 0.0},      {24, 2, 0.0},      {12517, 4, 0.0},     {633, 3, 0.0},
    {3, 2, 0.0},        {93145, 5, 0.0},   {5683, 4, 0.0},      {1000000, 6, 0.034},
    {3194, 4, 0.0},     {27, 2, 0.0},      {14992, 4, 0.0},     {800000, 6, 0.034},
    {10, 2, 0.0},       {5652, 4, 0.0},    {2173, 3, 0.44},     {4, 2, 0.44},
    {900000, 6, 0.034}, {18, 2, 0.76},     {15, 2, 0.0},        {286181, 5, 0.034},
    {105, 2, 0.44},     {142572, 5, 0.44},
}};

// N(0, 1), approximately, from 64 random bits: the sum of four 16-bit uniforms (Irwin-Hall),
// rescaled to unit variance. Bounded by +-2 sqrt(3), and a few multiplies instead of a log and a
// cosine: the generator computes ~40 of these per line.
double ApproxNormal(uint64_t bits) {
  const uint64_t sum =
      (bits & 0xffff) + (bits >> 16 & 0xffff) + (bits >> 32 & 0xffff) + (bits >> 48);
  constexpr double kSqrt3 = 1.7320508075688772;
  return ((static_cast<double>(sum) + 2.0) * (1.0 / 65536.0) - 2.0) * kSqrt3;
}

// 32 random bits as a probability threshold: a draw `bits < Threshold(p)` happens with
// probability p (to 2^-32).
uint32_t Threshold(double p) {
  return static_cast<uint32_t>(std::min(p * 4294967296.0, 4294967295.0));
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Moments {
  double sum = 0, sum_squares = 0;
  int64_t n = 0;
  void Add(double x) {
    sum += x;
    sum_squares += x * x;
    ++n;
  }
  double Stddev() const {
    const double mean = sum / n;
    return std::sqrt(std::max(0.0, sum_squares / n - mean * mean));
  }
};

// The scale bringing a term of standard deviation `measured` to `target` (1 for a term that
// does not vary, which then contributes a constant the bias absorbs).
double ScaleTo(double target, double measured) { return measured > 0 ? target / measured : 1.0; }

char* AppendUnsigned(char* p, uint64_t value) { return std::to_chars(p, p + 20, value).ptr; }

// log1p(value) for the small values most integer fields hold, looked up: std::log1p was an
// eighth of the generator's time.
class Log1pTable {
 public:
  Log1pTable() {
    for (int i = 0; i < kSize; ++i) table_[i] = std::log1p(static_cast<double>(i));
  }
  double operator()(int64_t value) const {
    return value < kSize ? table_[value] : std::log1p(static_cast<double>(value));
  }

 private:
  static constexpr int kSize = 4096;
  std::array<double, kSize> table_;
};

// The two lowercase hex digits of every byte.
class HexTable {
 public:
  HexTable() {
    static constexpr char kDigits[] = "0123456789abcdef";
    for (int i = 0; i < 256; ++i) {
      pairs_[2 * i] = kDigits[i >> 4];
      pairs_[2 * i + 1] = kDigits[i & 0xf];
    }
  }
  char* Append8(char* p, uint32_t value) const {
    for (int i = 3; i >= 0; --i) {
      std::memcpy(p + 2 * i, &pairs_[2 * (value & 0xff)], 2);
      value >>= 8;
    }
    return p + 8;
  }

 private:
  std::array<char, 512> pairs_;
};

const Log1pTable& Log1p() {
  static const Log1pTable* table = new Log1pTable();
  return *table;
}

const HexTable& Hex() {
  static const HexTable* table = new HexTable();
  return *table;
}

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
      const double p = Sigmoid(example.logit);
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
  for (const CriteoCategoricalFeature& f : kCategoricalFeatures)
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

const std::array<CriteoIntegerFeature, kCriteoIntegerFeatures>& CriteoIntegerFeatures() {
  return kIntegerFeatures;
}

const std::array<CriteoCategoricalFeature, kCriteoCategoricalFeatures>&
CriteoCategoricalFeatures() {
  return kCategoricalFeatures;
}

uint64_t PlantedCriteoModel::ValueBits(int feature, int64_t value, uint64_t slot) const {
  // Distinct (value, slot) pairs give distinct multiples of the odd constant (values and slots
  // stay far below 2^61), so one finalizer over the keyed product is enough.
  return Mix64(feature_keys_[feature] ^ (static_cast<uint64_t>(value) << 3 | slot) * kGolden);
}

uint32_t PlantedCriteoModel::CategoryHash(int feature, int64_t value) const {
  return static_cast<uint32_t>(ValueBits(feature, value, kNameSlot));
}

PlantedCriteoModel PlantedCriteoModel::Create(uint64_t seed) {
  PlantedCriteoModel model;
  const uint64_t seed_key = Mix64(seed ^ 0x43524954454f3031ULL);  // "CRITEO01"
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    model.feature_keys_[k] = Mix64(seed_key + (k + 1) * kGolden);
    // Some features matter more than others: weights log-normal around 1.
    model.category_weights_[k] = std::exp(0.5 * ApproxNormal(Mix64(model.feature_keys_[k] + 1)));
  }
  for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
    model.dense_weights_[k] = ApproxNormal(Mix64(seed_key + (k + 101) * kGolden));
  }
  // Calibration: the terms' spreads and the click rate on a sample of the unscaled model.
  PhiloxStream rng(seed, kCalibrationStream);
  std::vector<Terms> sample(kCalibrationExamples);
  Moments dense, categorical, interaction;
  CriteoExample example;
  for (Terms& terms : sample) {
    terms = model.DrawFeatures(rng, example);
    rng();  // the label's draws
    rng();
    dense.Add(terms.dense);
    categorical.Add(terms.categorical);
    interaction.Add(terms.interaction);
  }
  model.dense_scale_ = ScaleTo(kDenseStddev, dense.Stddev());
  model.categorical_scale_ = ScaleTo(kCategoricalStddev, categorical.Stddev());
  model.interaction_scale_ = ScaleTo(kInteractionStddev, interaction.Stddev());
  std::vector<double> logits;
  logits.reserve(sample.size());
  for (const Terms& t : sample) {
    logits.push_back(model.dense_scale_ * t.dense + model.categorical_scale_ * t.categorical +
                     model.interaction_scale_ * t.interaction);
  }
  // The mean probability grows with the bias: bisect for kBaseCtr.
  double low = -30, high = 30;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (low + high);
    double sum = 0;
    for (const double z : logits) sum += Sigmoid(mid + z);
    (sum / logits.size() < kBaseCtr ? low : high) = mid;
  }
  model.bias_ = 0.5 * (low + high);
  return model;
}

PlantedCriteoModel::Terms PlantedCriteoModel::DrawFeatures(PhiloxStream& rng,
                                                           CriteoExample& example) const {
  Terms terms;
  const Log1pTable& log1p = Log1p();
  for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
    const CriteoIntegerFeature& f = kIntegerFeatures[k];
    const uint32_t missing = rng();
    const uint64_t high = rng();
    const uint64_t bits = high << 32 | rng();
    if (missing < Threshold(f.missing_rate)) {
      example.integers[k] = -1;
      continue;
    }
    // At most exp(7.5 + 1.8 * 2 sqrt(3)) ~ 9e5: no overflow.
    const int64_t value =
        static_cast<int64_t>(std::exp(f.log_mean + f.log_stddev * ApproxNormal(bits)));
    example.integers[k] = value;
    terms.dense += dense_weights_[k] * log1p(value);
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    const CriteoCategoricalFeature& f = kCategoricalFeatures[k];
    const uint32_t missing = rng();
    const double u = rng() * (1.0 / 4294967296.0);
    double power = u;
    for (int i = 1; i < f.zipf_power; ++i) power *= u;
    const bool is_missing = missing < Threshold(f.missing_rate);
    // A missing value has parameters of its own, under value index V.
    const int64_t value =
        is_missing ? f.vocabulary
                   : std::min(f.vocabulary - 1, static_cast<int64_t>(f.vocabulary * power));
    example.categories[k] = is_missing ? -1 : value;
    terms.categorical += category_weights_[k] * ApproxNormal(ValueBits(k, value, kEffectSlot));
  }
  std::array<std::array<double, kLatentDim>, kInteractionFeatures.size()> latent;
  for (size_t i = 0; i < kInteractionFeatures.size(); ++i) {
    const int k = kInteractionFeatures[i];
    const int64_t value =
        example.categories[k] < 0 ? kCategoricalFeatures[k].vocabulary : example.categories[k];
    for (int d = 0; d < kLatentDim; ++d) {
      latent[i][d] = ApproxNormal(ValueBits(k, value, kLatentSlot + d));
    }
  }
  for (size_t a = 0; a < latent.size(); ++a) {
    for (size_t b = a + 1; b < latent.size(); ++b) {
      double dot = 0;
      for (int d = 0; d < kLatentDim; ++d) dot += latent[a][d] * latent[b][d];
      terms.interaction += 0.5 * dot;
    }
  }
  return terms;
}

CriteoExample PlantedCriteoModel::Draw(PhiloxStream& rng) const {
  CriteoExample example;
  const Terms terms = DrawFeatures(rng, example);
  example.logit = bias_ + dense_scale_ * terms.dense + categorical_scale_ * terms.categorical +
                  interaction_scale_ * terms.interaction;
  example.label = rng.Bernoulli(Sigmoid(example.logit)) ? 1 : 0;
  return example;
}

void PlantedCriteoModel::AppendLine(const CriteoExample& example, std::string& out) const {
  // The longest line: 1 + 13 * (20 + 1) + 26 * (8 + 1) + 1 bytes.
  char line[512];
  char* p = line;
  const HexTable& hex = Hex();
  *p++ = example.label ? '1' : '0';
  for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
    *p++ = '\t';
    if (example.integers[k] >= 0) p = AppendUnsigned(p, static_cast<uint64_t>(example.integers[k]));
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    *p++ = '\t';
    if (example.categories[k] >= 0) p = hex.Append8(p, CategoryHash(k, example.categories[k]));
  }
  *p++ = '\n';
  out.append(line, p);
}

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
