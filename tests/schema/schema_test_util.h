// Shared by the schema tests: sample values to encode, exact comparisons, a temporary directory,
// and byte-level forging of encoded files.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/checkpoint/checkpoint.h"
#include "core/serving/exported_model.h"
#include "schema/base/internal/envelope.h"
#include "tessera/model.h"
#include "tessera/workloads/reference_models.h"

namespace tessera {
namespace schema_test {

template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

inline bool Contains(const absl::Status& status, absl::string_view text) {
  return std::string(status.message()).find(std::string(text)) != std::string::npos;
}

// Values 0.5, 1.5, ... with a few special floats up front (they must survive bit for bit).
inline Tensor Sample(Shape shape, float scale = 1.0f) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = (static_cast<float>(i) + 0.5f) * scale;
  const float special[] = {-0.0f, std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min()};
  for (int64_t i = 0; i < t.size() && i < 4; ++i) t.values()[i] = special[i];
  return t;
}

// Same shape and the same bits (so NaN equals NaN and -0 differs from 0).
inline bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         (a.size() == 0 ||
          std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) == 0);
}

inline TensorSlice SampleSlice(Shape full_shape, int64_t row_offset, int64_t rows,
                               bool with_slots) {
  TensorSlice s;
  s.variable = "emb";
  s.full_shape = full_shape;
  s.row_offset = row_offset;
  s.value = Sample(full_shape.rank() == 0 ? Shape() : full_shape.WithRows(rows));
  if (with_slots) {
    s.slot_names = {"m", "v"};
    s.slots = {Sample(s.value.shape(), 2.0f), Sample(s.value.shape(), -3.0f)};
  }
  s.step = 0x0123456789AB;  // a pattern the forging tests can find in the bytes
  return s;
}

inline bool SameSlice(const TensorSlice& a, const TensorSlice& b) {
  if (a.variable != b.variable || a.full_shape != b.full_shape || a.dtype != b.dtype ||
      a.row_offset != b.row_offset || !SameTensor(a.value, b.value) ||
      a.slot_names != b.slot_names || a.slots.size() != b.slots.size() || a.step != b.step ||
      a.checkpoint != b.checkpoint) {
    return false;
  }
  for (size_t i = 0; i < a.slots.size(); ++i) {
    if (!SameTensor(a.slots[i], b.slots[i])) return false;
  }
  return true;
}

inline CheckpointManifest SampleManifest() {
  CheckpointManifest m;
  m.global_step = 1234;
  CheckpointVariable emb;
  emb.name = "user_embedding";
  emb.shape = Shape{13, 4};
  emb.optimizer =
      OptimizerSpec{"adagrad", {{"initial_accumulator_value", 0.1}, {"learning_rate", 0.05}}};
  emb.slot_names = {"accumulator"};
  emb.step = 1200;
  emb.slices = {{"user_embedding.part_0", 0, 7}, {"user_embedding.part_1", 7, 6}};
  CheckpointVariable bias;
  bias.name = "bias";
  bias.shape = Shape{1};
  bias.slices = {{"bias.part_0", 0, 1}};
  CheckpointVariable scalar;
  scalar.name = "scale";
  scalar.dtype = DType::kFloat32;
  scalar.slices = {{"scale.part_0", 0, 1}};
  CheckpointVariable empty;
  empty.name = "empty";
  empty.shape = Shape{0, 3};
  empty.dtype = DType::kInt64;
  empty.slices = {{"empty.part_0", 0, 0}};
  m.variables = {emb, bias, scalar, empty};
  return m;
}

inline bool SameManifest(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.global_step != b.global_step || a.run_id != b.run_id ||
      a.variables.size() != b.variables.size()) {
    return false;
  }
  for (size_t i = 0; i < a.variables.size(); ++i) {
    const CheckpointVariable& x = a.variables[i];
    const CheckpointVariable& y = b.variables[i];
    if (x.name != y.name || x.shape != y.shape || x.dtype != y.dtype ||
        x.optimizer.has_value() != y.optimizer.has_value() || x.slot_names != y.slot_names ||
        x.step != y.step || x.slices.size() != y.slices.size()) {
      return false;
    }
    if (x.optimizer &&
        (x.optimizer->name != y.optimizer->name || x.optimizer->params != y.optimizer->params)) {
      return false;
    }
    for (size_t k = 0; k < x.slices.size(); ++k) {
      if (x.slices[k].file != y.slices[k].file ||
          x.slices[k].row_offset != y.slices[k].row_offset ||
          x.slices[k].rows != y.slices[k].rows) {
        return false;
      }
    }
  }
  return true;
}

// A tiny recsys model (a few dozen floats), fully initialized, with its serving signature.
inline ExportedModel SampleModel(const ModelSpec& spec) {
  ExportedModel model;
  model.spec = spec;
  model.signatures = {Must(ServingSignature(spec))};
  for (const ParamSpec& p : spec.params) {
    model.variables.emplace(p.name,
                            Must(MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows())));
  }
  model.step = 0x0123456789AB;
  return model;
}

inline ExportedModel SmallRecsysModel() {
  RecsysModelOptions options;
  options.num_users = 5;
  options.num_items = 4;
  options.embedding_dim = 2;
  options.hidden_units = 3;
  options.seed = 11;
  return SampleModel(Must(RecsysModelSpec(options)));
}

inline bool SameSignatures(const std::vector<TensorSignature>& a,
                           const std::vector<TensorSignature>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape) {
      return false;
    }
  }
  return true;
}

inline bool SameModel(const ExportedModel& a, const ExportedModel& b) {
  if (a.spec != b.spec || a.step != b.step || a.text_inputs != b.text_inputs ||
      a.signatures.size() != b.signatures.size() || a.variables.size() != b.variables.size()) {
    return false;
  }
  for (size_t i = 0; i < a.signatures.size(); ++i) {
    if (a.signatures[i].name != b.signatures[i].name ||
        !SameSignatures(a.signatures[i].inputs, b.signatures[i].inputs) ||
        !SameSignatures(a.signatures[i].outputs, b.signatures[i].outputs)) {
      return false;
    }
  }
  for (auto x = a.variables.begin(), y = b.variables.begin(); x != a.variables.end(); ++x, ++y) {
    if (x->first != y->first || !SameTensor(x->second, y->second)) return false;
  }
  return true;
}

// A fresh directory under the system's temporary directory, removed with its content.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-schema-XXXXXX");
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

// Byte-level forging: the body (Cap'n Proto message, then a slice file's data) of an encoded
// file, and a file around a body, so a test can change a field and still pass the envelope's
// checksum.
using schema_internal::FileKind;

inline std::string BodyOf(const std::string& file) {
  REQUIRE(file.size() >= schema_internal::kEnvelopeHeaderBytes);
  return file.substr(schema_internal::kEnvelopeHeaderBytes);
}

// The size of the file's tail (a slice file's data section), from its header.
inline uint64_t TailBytesOf(const std::string& file) {
  REQUIRE(file.size() >= schema_internal::kEnvelopeHeaderBytes);
  uint32_t words = 0;
  std::memcpy(&words, file.data() + 20, 4);
  return uint64_t{words} * 8;
}

// A file around `body` whose last `tail_bytes` are its tail (TailBytesOf the file it came from).
inline std::string Reseal(FileKind kind, const std::string& body, uint64_t tail_bytes = 0) {
  return schema_internal::Seal(kind, body, tail_bytes);
}

inline std::string Int64Bytes(std::vector<int64_t> values) {
  std::string out(values.size() * 8, '\0');
  std::memcpy(out.data(), values.data(), out.size());  // little-endian host, as the format
  return out;
}

// Replaces the only occurrence of `from` in `body` (of the same size) with `to`.
inline std::string ReplaceUnique(std::string body, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  const size_t at = body.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "pattern not found");
  REQUIRE_MESSAGE(body.find(from, at + 1) == std::string::npos, "pattern not unique");
  body.replace(at, to.size(), to);
  return body;
}

}  // namespace schema_test
}  // namespace tessera
