#include "serving/predict_request.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "serving/internal/request_shape.h"
#include "serving/json.h"
#include "serving/json_sax.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

using internal::InputIndex;
using internal::InputList;
using internal::RequestShape;

using string_t = Json::string_t;
using binary_t = Json::binary_t;

// Pass 2, columns: each value of each column of the chosen "inputs" field (its last occurrence of
// each input) as a small JSON tree, put in its place in batches sized for the count. A bad value
// does not stop the reading: the error kept is that of the lowest instance, then of the
// signature's first input, as a reading row by row would find it.
class ColumnReader {
 public:
  ColumnReader(const InstanceFormat& format, const RequestShape& shape, int64_t count)
      : format_(format), inputs_field_(shape.inputs_field()), value_(MaxValues(format)) {
    for (const InstanceFormat::Input& input : format.inputs) {
      last_occurrence_.push_back(shape.occurrences(input.name));
    }
    occurrences_.assign(format.inputs.size(), 0);
    for (int64_t start = 0; start < count; start += kInstancesPerBatch) {
      const int64_t size = std::min(kInstancesPerBatch, count - start);
      batch_sizes_.push_back(size);
      std::vector<InputColumn> columns;
      for (const InstanceFormat::Input& input : format.inputs) {
        columns.emplace_back(input);
        columns.back().Reserve(size);
      }
      columns_.push_back(std::move(columns));
    }
  }

  bool null() { return Scalar(Json(nullptr)); }
  bool boolean(bool value) { return Scalar(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return Scalar(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return Scalar(Json(value)); }
  bool number_float(Json::number_float_t value, const string_t&) { return Scalar(Json(value)); }
  bool string(string_t& value) { return Scalar(Json(std::move(value))); }
  bool binary(binary_t&) { return Scalar(Json()); }
  bool start_object(std::size_t) {
    if (depth_ == 1 && key_ == "inputs" && inputs_fields_ == inputs_field_) in_object_ = true;
    return Open(Json::object());
  }
  bool start_array(std::size_t) {
    if (depth_ == 1 && key_ == "inputs" && inputs_fields_ == inputs_field_) {
      column_ = 0;  // a signature of one input (pass 1 checked)
      element_depth_ = 2;
      index_ = 0;
    } else if (depth_ == 2 && in_object_ && column_ >= 0 &&
               occurrences_[column_] == last_occurrence_[column_]) {
      element_depth_ = 3;
      index_ = 0;
    }
    return Open(Json::array());
  }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(string_t& key) {
    if (value_.open()) {
      value_.Key(std::move(key));
    } else if (depth_ == 1) {
      key_ = key;
      if (key_ == "inputs") ++inputs_fields_;
    } else if (depth_ == 2 && in_object_) {
      column_ = InputIndex(format_, key);
      if (column_ >= 0) ++occurrences_[column_];
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    status_ = MalformedJsonError(error);  // pass 1 read the same text, so this does not happen
    return false;
  }

  const absl::Status& status() const { return status_; }
  std::vector<Batch> TakeBatches() {
    std::vector<Batch> batches(columns_.size());
    for (size_t b = 0; b < columns_.size(); ++b) {
      batches[b].size = batch_sizes_[b];
      for (InputColumn& column : columns_[b]) column.MoveInto(batches[b]);
    }
    return batches;
  }

 private:
  bool reading() const { return element_depth_ > 0; }

  bool Scalar(Json value) {
    if (!reading()) return true;
    if (!skipping_ && !value_.Add(std::move(value))) TooLarge();
    if (depth_ == element_depth_) Finish();  // the value is this scalar
    return true;
  }

  bool Open(Json container) {
    if (reading() && depth_ >= element_depth_ && !skipping_ && !value_.Add(std::move(container))) {
      TooLarge();
    }
    ++depth_;
    return true;
  }

  bool Close() {
    --depth_;
    if (reading()) {
      if (depth_ >= element_depth_) {
        if (!skipping_) value_.Close();
        if (depth_ == element_depth_) Finish();
        return true;
      }
      element_depth_ = 0;  // the column (or the bare array) is complete
      return depth_ != 1;  // after a bare array, every value is in: stop reading
    }
    if (depth_ == 1 && in_object_) return false;  // every column is in: stop reading
    return true;
  }

  void TooLarge() {
    Keep(index_, value_.TooLarge(absl::StrCat("instance ", index_), format_));
    skipping_ = true;
  }

  // A value is complete (or was refused): into its place with it.
  void Finish() {
    const int64_t index = index_++;
    const Json value = value_.Take();
    const size_t b = static_cast<size_t>(index / kInstancesPerBatch);
    if (skipping_) {
      skipping_ = false;
      if (b < columns_.size()) columns_[b][static_cast<size_t>(column_)].AppendPlaceholder();
      return;
    }
    // Pass 1 counted the values, so every one has its place; a column's values come in order.
    if (b >= columns_.size()) return;
    InputColumn& column = columns_[b][static_cast<size_t>(column_)];
    absl::Status status = column.Append(value);
    if (!status.ok()) {
      column.AppendPlaceholder();  // the batch is refused; its columns stay aligned
      Keep(index, Annotate(status, absl::StrCat("instance ", index)));
    }
  }

  // Keeps the error of instance `index` (of input column_) when it is the first a reading row by
  // row would meet.
  void Keep(int64_t index, absl::Status status) {
    if (status_.ok() || index < error_index_ ||
        (index == error_index_ && column_ < error_column_)) {
      status_ = std::move(status);
      error_index_ = index;
      error_column_ = column_;
    }
  }

  const InstanceFormat& format_;
  const int inputs_field_;
  ValueBuilder value_;
  std::vector<int> last_occurrence_;  // per input of the format
  std::vector<int> occurrences_;      // per input: its fields seen so far
  std::vector<std::vector<InputColumn>> columns_;  // per batch, per input of the format
  std::vector<int64_t> batch_sizes_;
  int inputs_fields_ = 0;
  bool in_object_ = false;
  int64_t depth_ = 0;
  std::string key_;
  int column_ = -1;        // the input being read
  int element_depth_ = 0;  // the depth of the values being read; 0: none
  bool skipping_ = false;  // the value being read was refused: its events are dropped
  int64_t index_ = 0;      // the instance of the value being read
  absl::Status status_;
  int64_t error_index_ = 0;
  int error_column_ = 0;
};

std::vector<std::string> Keys(const std::map<std::string, InstanceFormat>& formats) {
  std::vector<std::string> keys;
  for (const auto& [key, format] : formats) keys.push_back(key);
  return keys;
}

absl::Status TooMany(int64_t instances, const PredictLimits& limits) {
  return absl::ResourceExhaustedError(absl::StrCat("the request has ", instances,
                                                   " instances; this server takes at most ",
                                                   limits.max_instances, " per request"));
}

}  // namespace

absl::StatusOr<PredictRequest> ReadPredictRequest(
    absl::string_view body, const std::map<std::string, InstanceFormat>& formats,
    const PredictLimits& limits) {
  RequestShape shape;
  if (!Json::sax_parse(body.begin(), body.end(), &shape)) return shape.error();
  TESSERA_RETURN_IF_ERROR(shape.Check());
  auto format = formats.find(shape.signature());
  if (format == formats.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown signature '", ShownName(shape.signature()),
                     "'; the model's signatures are ", absl::StrJoin(Keys(formats), ", ")));
  }
  PredictRequest request;
  request.format = &format->second;
  request.columnar = shape.columnar();
  if (shape.columnar()) {
    TESSERA_ASSIGN_OR_RETURN(request.size, shape.CheckColumns(format->second));
    if (request.size > limits.max_instances) return TooMany(request.size, limits);
    ColumnReader reader(format->second, shape, request.size);
    Json::sax_parse(body.begin(), body.end(), &reader);  // stops after the columns
    TESSERA_RETURN_IF_ERROR(reader.status());
    request.batches = reader.TakeBatches();
    return request;
  }
  if (shape.instances() > limits.max_instances) return TooMany(shape.instances(), limits);
  request.size = shape.instances();
  BatchBuilder builder(format->second);
  builder.Reserve(std::min(request.size, kInstancesPerBatch));
  RowReader reader("instances", shape.instances_field(), "instance", format->second,
                   [&](Json instance, int64_t index) -> absl::Status {
                     TESSERA_RETURN_IF_ERROR(builder.Add(instance));
                     if (builder.size() == kInstancesPerBatch) {
                       request.batches.push_back(builder.Take());
                       builder.Reserve(std::min(request.size - index - 1, kInstancesPerBatch));
                     }
                     return absl::OkStatus();
                   });
  Json::sax_parse(body.begin(), body.end(), &reader);  // stops after the instances
  TESSERA_RETURN_IF_ERROR(reader.status());
  if (builder.size() > 0) request.batches.push_back(builder.Take());
  return request;
}

}  // namespace tessera::serving
