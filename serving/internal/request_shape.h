// RequestShape: pass 1 of reading a `:predict` request (Note [Bounded predict requests],
// serving/predict_request.h) — the shape of the whole body, read with nlohmann's SAX parser in
// constant memory before anything is built — and the helpers the two passes share.
//
// Thread-safety: a value, used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serving/instances.h"
#include "serving/json.h"
#include "serving/json_sax.h"
#include "serving/predict_request.h"  // kMaxColumnarFields

namespace tessera::serving::internal {

// The signature's input names, "a, b, c".
std::string InputList(const InstanceFormat& format);
// The index of input `name` in `format`, or -1.
int InputIndex(const InstanceFormat& format, absl::string_view name);

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
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

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
  absl::Status Check() const;

  // The instances of a columnar request for `format`: the columns' errors, in the order of the
  // header comment.
  absl::StatusOr<int64_t> CheckColumns(const InstanceFormat& format) const;

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
  bool Value(JsonKind kind);
  // A field of the "inputs" object: counted, and the one whose value is read next.
  void Column(const string_t& name);
  // The field of the last "inputs" object named `name`, or null.
  const ColumnShape* Find(const std::string& name) const;

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

}  // namespace tessera::serving::internal
