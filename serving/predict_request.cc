#include "serving/predict_request.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status.h"
#include "serving/json.h"
#include "serving/json_sax.h"

namespace tessera::serving {
namespace {

using string_t = Json::string_t;
using binary_t = Json::binary_t;

std::string InputList(const InstanceFormat& format) {
  return absl::StrJoin(format.inputs, ", ", [](std::string* out, const InstanceFormat::Input& in) {
    absl::StrAppend(out, in.name);
  });
}

int InputIndex(const InstanceFormat& format, absl::string_view name) {
  for (size_t i = 0; i < format.inputs.size(); ++i) {
    if (format.inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// A field of a columnar "inputs" object as pass 1 saw it.
struct ColumnShape {
  std::string name;
  int occurrences = 0;  // how often the field appears; its last value counts
  JsonKind kind = JsonKind::kNull;
  int64_t count = 0;  // elements, when an array
};

// Pass 1 (Note [Bounded predict requests]): the request's shape — the kind of the whole, its
// fields, the signature name, the kind and length of the last "instances", the kind of the last
// "inputs" and the kind and length of each of its fields — in constant memory but for the one
// unknown field name an error shows and the columns' names (kMaxColumnarFields at most).
class RequestShape {
 public:
  // nlohmann's SAX interface.
  bool null() { return Value(JsonKind::kNull); }
  bool boolean(bool) { return Value(JsonKind::kBoolean); }
  bool number_integer(Json::number_integer_t) { return Value(JsonKind::kInteger); }
  bool number_unsigned(Json::number_unsigned_t) { return Value(JsonKind::kInteger); }
  bool number_float(Json::number_float_t, const string_t&) { return Value(JsonKind::kNumber); }
  bool string(string_t& value) {
    if (depth_ == 1 && key_ == "signature_name") signature_ = value;
    return Value(JsonKind::kString);
  }
  bool binary(binary_t&) { return Value(JsonKind::kBinary); }
  bool start_object(std::size_t) {
    Value(JsonKind::kObject);
    if (depth_ == 1 && key_ == "inputs") in_inputs_object_ = true;
    ++depth_;
    return true;
  }
  bool start_array(std::size_t) {
    Value(JsonKind::kArray);
    if (depth_ == 1 && key_ == "instances") in_instances_ = true;
    if (depth_ == 1 && key_ == "inputs") in_inputs_array_ = true;
    if (depth_ == 2 && in_inputs_object_ && column_ >= 0) in_column_ = true;
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    if (depth_ == 1) in_inputs_object_ = false;
    return true;
  }
  bool end_array() {
    --depth_;
    if (depth_ == 1) in_instances_ = in_inputs_array_ = false;
    if (depth_ == 2) in_column_ = false;
    return true;
  }
  bool key(string_t& key) {
    if (depth_ == 2 && in_inputs_object_) {
      Column(key);
      return true;
    }
    if (depth_ != 1) return true;
    key_ = key;
    if (key_ == "instances") {
      ++instances_fields_;
    } else if (key_ == "inputs") {
      ++inputs_fields_;
    } else if (key_ != "signature_name" && (bad_field_.empty() || key_ < bad_field_)) {
      bad_field_ = key_;  // an unknown field: the first in key order is reported
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    error_ = MalformedJsonError(error);
    return false;
  }

  // The first error in the order of the header comment that needs no signature, after a
  // complete parse.
  absl::Status Check() const {
    if (top_ != JsonKind::kObject) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request must be a JSON object with \"instances\" or \"inputs\", got ",
                       JsonKindName(top_)));
    }
    const bool bad_signature = signature_kind_.has_value() && *signature_kind_ != JsonKind::kString;
    if (bad_signature && (bad_field_.empty() || bad_field_ > "signature_name")) {
      return absl::InvalidArgumentError(absl::StrCat("\"signature_name\" must be a string, got ",
                                                     JsonKindName(*signature_kind_)));
    }
    if (!bad_field_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field \"", ShownName(bad_field_),
                       "\"; a predict request has \"instances\" or \"inputs\", and optionally "
                       "\"signature_name\""));
    }
    if (instances_fields_ > 0 && inputs_fields_ > 0) {
      return absl::InvalidArgumentError(
          "a predict request has either \"instances\" (rows) or \"inputs\" (columns), not both");
    }
    if (instances_fields_ == 0 && inputs_fields_ == 0) {
      return absl::InvalidArgumentError("the request has no \"instances\" (or \"inputs\")");
    }
    if (columnar()) {
      if (inputs_kind_ != JsonKind::kObject && inputs_kind_ != JsonKind::kArray) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"inputs\" must be an object mapping each input to its values (or, "
                         "for a signature of one input, the array of its values), got ",
                         JsonKindName(inputs_kind_)));
      }
    } else if (instances_kind_ != JsonKind::kArray || instances_ == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"instances\" must be a non-empty array, got ",
          instances_kind_ == JsonKind::kArray ? "an empty array" : JsonKindName(instances_kind_)));
    }
    return absl::OkStatus();
  }

  // The instances of a columnar request for `format`: the columns' errors, in the order of the
  // header comment.
  absl::StatusOr<int64_t> CheckColumns(const InstanceFormat& format) const {
    const auto column_error = [](const std::string& input, JsonKind kind, int64_t count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"inputs\": input '", input,
          "' must be a non-empty array of values, one per instance, "
          "got ",
          kind == JsonKind::kArray && count == 0 ? "an empty array" : JsonKindName(kind)));
    };
    if (inputs_kind_ == JsonKind::kArray) {
      if (format.inputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"inputs\" is an array, but signature '", format.signature, "' has ",
                         format.inputs.size(), " inputs (", InputList(format),
                         "): send an object mapping each input to its values"));
      }
      if (inputs_count_ == 0) {
        return column_error(format.inputs[0].name, JsonKind::kArray, 0);
      }
      return inputs_count_;
    }
    if (too_many_columns_) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\" has more than ", kMaxColumnarFields, " fields"));
    }
    const ColumnShape* unknown = nullptr;
    for (const ColumnShape& column : columns_) {
      if (InputIndex(format, column.name) < 0 &&
          (unknown == nullptr || column.name < unknown->name))
        unknown = &column;
    }
    if (unknown != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\": unknown input '", ShownName(unknown->name),
                       "'; the signature's inputs are ", InputList(format)));
    }
    std::vector<const ColumnShape*> columns;
    for (const InstanceFormat::Input& input : format.inputs) {
      const ColumnShape* column = Find(input.name);
      if (column == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"inputs\" has no input '", input.name, "'"));
      }
      columns.push_back(column);
    }
    for (const ColumnShape* column : columns) {
      if (column->kind != JsonKind::kArray || column->count == 0) {
        return column_error(column->name, column->kind, column->count);
      }
    }
    for (const ColumnShape* column : columns) {
      if (column->count != columns[0]->count) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"inputs\": input '", column->name, "' has ", column->count,
                         " values, input '", columns[0]->name, "' has ", columns[0]->count,
                         "; every input needs one value per instance"));
      }
    }
    return columns[0]->count;
  }

  const absl::Status& error() const { return error_; }
  const std::string& signature() const { return signature_; }
  bool columnar() const { return inputs_fields_ > 0; }
  // Which "instances" / "inputs" field is the one that counts (the last, as in a JSON tree),
  // from 1.
  int instances_field() const { return instances_fields_; }
  int inputs_field() const { return inputs_fields_; }
  int64_t instances() const { return instances_; }
  // How often an "inputs" field named `name` appears in the last "inputs" object.
  int occurrences(const std::string& name) const {
    const ColumnShape* column = Find(name);
    return column == nullptr ? 0 : column->occurrences;
  }

 private:
  // Every value's first event, before a container's depth changes.
  bool Value(JsonKind kind) {
    if (depth_ == 0) {
      top_ = kind;
    } else if (depth_ == 1) {
      if (key_ == "instances") {
        instances_kind_ = kind;
        instances_ = 0;
      } else if (key_ == "inputs") {
        inputs_kind_ = kind;
        inputs_count_ = 0;
        columns_.clear();
        column_index_.clear();
        too_many_columns_ = false;
        column_ = -1;
      } else if (key_ == "signature_name") {
        signature_kind_ = kind;
      }
    } else if (depth_ == 2) {
      if (in_instances_) {
        ++instances_;
      } else if (in_inputs_array_) {
        ++inputs_count_;
      } else if (in_inputs_object_ && column_ >= 0) {
        columns_[column_].kind = kind;
        columns_[column_].count = 0;
      }
    } else if (depth_ == 3 && in_column_) {
      ++columns_[column_].count;
    }
    return true;
  }

  void Column(const string_t& name) {
    auto it = column_index_.find(name);
    if (it == column_index_.end()) {
      if (columns_.size() >= kMaxColumnarFields) {
        too_many_columns_ = true;
        column_ = -1;
        return;
      }
      it = column_index_.emplace(name, static_cast<int>(columns_.size())).first;
      columns_.push_back({name});
    }
    column_ = it->second;
    ++columns_[column_].occurrences;
  }

  const ColumnShape* Find(const std::string& name) const {
    auto it = column_index_.find(name);
    return it == column_index_.end() ? nullptr : &columns_[it->second];
  }

  int64_t depth_ = 0;
  std::string key_;  // the last key of the top-level object
  JsonKind top_ = JsonKind::kNull;
  std::optional<JsonKind> signature_kind_;
  std::string signature_ = kServingDefault;
  std::string bad_field_;
  int instances_fields_ = 0;
  bool in_instances_ = false;
  JsonKind instances_kind_ = JsonKind::kNull;
  int64_t instances_ = 0;
  int inputs_fields_ = 0;
  JsonKind inputs_kind_ = JsonKind::kNull;
  bool in_inputs_array_ = false;
  int64_t inputs_count_ = 0;
  bool in_inputs_object_ = false;
  std::vector<ColumnShape> columns_;
  std::map<std::string, int> column_index_;
  bool too_many_columns_ = false;
  int column_ = -1;  // the field of the "inputs" object being read
  bool in_column_ = false;
  absl::Status error_;
};

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
