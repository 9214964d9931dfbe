#include "cli/internal/predict_request.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/internal/json.h"
#include "core/status.h"

namespace tessera::cli {
namespace {

using string_t = Json::string_t;
using binary_t = Json::binary_t;

// The kinds of JSON value, named as JsonTypeName names them.
enum class Kind { kNull, kBoolean, kInteger, kNumber, kString, kArray, kObject, kBinary };

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBoolean:
      return "a boolean";
    case Kind::kInteger:
      return "an integer";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
    case Kind::kBinary:
      break;
  }
  return "an unsupported value";
}

// A field name as an error message shows it: long ones cut.
std::string Shown(const std::string& name) {
  constexpr size_t kMax = 64;
  return name.size() <= kMax ? name : absl::StrCat(name.substr(0, kMax), "...");
}

// Pass 1 (Note [Bounded predict requests]): the request's shape — the kind of the whole, its
// fields, the signature name, the kind and length of the last "instances" — in constant memory
// (but for the one unknown field name an error shows).
class RequestShape {
 public:
  // nlohmann's SAX interface.
  bool null() { return Value(Kind::kNull); }
  bool boolean(bool) { return Value(Kind::kBoolean); }
  bool number_integer(Json::number_integer_t) { return Value(Kind::kInteger); }
  bool number_unsigned(Json::number_unsigned_t) { return Value(Kind::kInteger); }
  bool number_float(Json::number_float_t, const string_t&) { return Value(Kind::kNumber); }
  bool string(string_t& value) {
    if (depth_ == 1 && key_ == "signature_name") signature_ = value;
    return Value(Kind::kString);
  }
  bool binary(binary_t&) { return Value(Kind::kBinary); }
  bool start_object(std::size_t) {
    Value(Kind::kObject);
    ++depth_;
    return true;
  }
  bool start_array(std::size_t) {
    Value(Kind::kArray);
    if (depth_ == 1 && key_ == "instances") in_instances_ = true;
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    if (depth_ == 1) in_instances_ = false;
    return true;
  }
  bool key(string_t& key) {
    if (depth_ != 1) return true;
    key_ = key;
    if (key_ == "instances") {
      ++instances_fields_;
    } else if (key_ != "signature_name" && (bad_field_.empty() || key_ < bad_field_)) {
      bad_field_ = key_;  // "inputs" or an unknown field: the first in key order is reported
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    error_ = MalformedJsonError(error);
    return false;
  }

  // The first error in the order of the header comment, after a complete parse.
  absl::Status Check() const {
    if (top_ != Kind::kObject) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the request must be a JSON object with \"instances\", got ", KindName(top_)));
    }
    const bool bad_signature = signature_kind_.has_value() && *signature_kind_ != Kind::kString;
    if (bad_signature && (bad_field_.empty() || bad_field_ > "signature_name")) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"signature_name\" must be a string, got ", KindName(*signature_kind_)));
    }
    if (bad_field_ == "inputs") {
      return absl::InvalidArgumentError(
          "the columnar \"inputs\" format is not supported; send \"instances\"");
    }
    if (!bad_field_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field \"", Shown(bad_field_),
                       "\"; a predict request has \"instances\" and optionally "
                       "\"signature_name\""));
    }
    if (instances_fields_ == 0) {
      return absl::InvalidArgumentError("the request has no \"instances\"");
    }
    if (instances_kind_ != Kind::kArray || instances_ == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"instances\" must be a non-empty array, got ",
          instances_kind_ == Kind::kArray ? "an empty array" : KindName(instances_kind_)));
    }
    return absl::OkStatus();
  }

  const absl::Status& error() const { return error_; }
  const std::string& signature() const { return signature_; }
  // Which "instances" field is the one that counts (the last, as in a JSON tree), from 1.
  int instances_field() const { return instances_fields_; }
  int64_t instances() const { return instances_; }

 private:
  // Every value's first event, before a container's depth changes.
  bool Value(Kind kind) {
    if (depth_ == 0) {
      top_ = kind;
    } else if (depth_ == 1) {
      if (key_ == "instances") {
        instances_kind_ = kind;
        instances_ = 0;
      } else if (key_ == "signature_name") {
        signature_kind_ = kind;
      }
    } else if (depth_ == 2 && in_instances_) {
      ++instances_;
    }
    return true;
  }

  int64_t depth_ = 0;
  std::string key_;  // the last key of the top-level object
  Kind top_ = Kind::kNull;
  std::optional<Kind> signature_kind_;
  std::string signature_ = kServingDefault;
  std::string bad_field_;
  int instances_fields_ = 0;
  bool in_instances_ = false;
  Kind instances_kind_ = Kind::kNull;
  int64_t instances_ = 0;
  absl::Status error_;
};

// Pass 2: each instance of the chosen "instances" field as a small JSON tree, added to a
// BatchBuilder as soon as it is complete.
class InstanceReader {
 public:
  InstanceReader(const InstanceFormat& format, int instances_field, int64_t count)
      : format_(format), builder_(format), instances_field_(instances_field), count_(count) {
    builder_.Reserve(std::min(count, kInstancesPerBatch));
    // An object with each input, a dense input an array of `width` numbers: values beyond twice
    // that (and a little) are surely not an instance of this signature.
    int64_t values = 1;
    for (const InstanceFormat::Input& input : format.inputs) {
      values += 1 + (input.kind == InputKind::kDense ? input.width : 0);
    }
    max_values_ = 2 * values + 16;
  }

  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool value) { return Put(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return Put(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return Put(Json(value)); }
  bool number_float(Json::number_float_t value, const string_t&) { return Put(Json(value)); }
  bool string(string_t& value) { return Put(Json(std::move(value))); }
  bool binary(binary_t&) { return Put(Json()); }
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t) {
    if (depth_ == 1 && key_ == "instances") {
      in_instances_ = instances_fields_ == instances_field_;
      ++depth_;
      return true;
    }
    return Open(Json::array());
  }
  bool end_object() { return Close(); }
  bool end_array() {
    if (depth_ == 2 && in_instances_) return false;  // every instance is in: stop reading
    return Close();
  }
  bool key(string_t& key) {
    if (building()) {
      key_ = std::move(key);
    } else if (depth_ == 1) {
      key_ = key;
      if (key_ == "instances") ++instances_fields_;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    status_ = MalformedJsonError(error);  // pass 1 read the same text, so this does not happen
    return false;
  }

  const absl::Status& status() const { return status_; }
  // The batches read; call once, after the parse.
  std::vector<Batch> TakeBatches() {
    if (builder_.size() > 0) batches_.push_back(builder_.Take());
    return std::move(batches_);
  }

 private:
  bool building() const { return in_instances_ && depth_ >= 2; }

  bool Open(Json container) {
    if (building()) {
      Json* slot = Place(std::move(container));
      if (slot == nullptr) return false;
      stack_.push_back(slot);
    }
    ++depth_;
    return true;
  }

  bool Close() {
    --depth_;
    if (!building()) return true;
    stack_.pop_back();
    return stack_.empty() ? Finish() : true;
  }

  bool Put(Json value) {
    if (!building()) return true;
    if (Place(std::move(value)) == nullptr) return false;
    return stack_.empty() ? Finish() : true;
  }

  // Puts `value` where the instance being built expects the next value; null (with status_ set)
  // when the instance grows beyond any instance of the signature.
  Json* Place(Json value) {
    if (++values_ > max_values_) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          "instance ", index_, ": more than ", max_values_, " values; the signature's inputs are ",
          absl::StrJoin(format_.inputs, ", ",
                        [](std::string* out, const InstanceFormat::Input& input) {
                          absl::StrAppend(out, input.name);
                        })));
      return nullptr;
    }
    if (stack_.empty()) {
      instance_ = std::move(value);
      return &instance_;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    Json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }

  // The instance is complete: into the batch with it.
  bool Finish() {
    status_ = Annotate(builder_.Add(instance_), absl::StrCat("instance ", index_));
    instance_ = Json();
    values_ = 0;
    ++index_;
    if (builder_.size() == kInstancesPerBatch) {
      batches_.push_back(builder_.Take());
      builder_.Reserve(std::min(count_ - index_, kInstancesPerBatch));
    }
    return status_.ok();
  }

  const InstanceFormat& format_;
  BatchBuilder builder_;
  const int instances_field_;
  const int64_t count_;
  std::vector<Batch> batches_;
  int instances_fields_ = 0;
  bool in_instances_ = false;
  int64_t depth_ = 0;
  std::string key_;
  Json instance_;
  std::vector<Json*> stack_;  // the open containers of instance_
  int64_t values_ = 0;
  int64_t max_values_ = 0;
  int64_t index_ = 0;
  absl::Status status_;
};

std::vector<std::string> Keys(const std::map<std::string, InstanceFormat>& formats) {
  std::vector<std::string> keys;
  for (const auto& [key, format] : formats) keys.push_back(key);
  return keys;
}

}  // namespace

absl::StatusOr<PredictRequest> ReadPredictRequest(
    absl::string_view body, const std::map<std::string, InstanceFormat>& formats,
    const PredictLimits& limits) {
  RequestShape shape;
  if (!Json::sax_parse(body.begin(), body.end(), &shape)) return shape.error();
  RETURN_IF_ERROR(shape.Check());
  auto format = formats.find(shape.signature());
  if (format == formats.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown signature '", Shown(shape.signature()),
                                                   "'; the model's signatures are ",
                                                   absl::StrJoin(Keys(formats), ", ")));
  }
  if (shape.instances() > limits.max_instances) {
    return absl::ResourceExhaustedError(absl::StrCat("the request has ", shape.instances(),
                                                     " instances; this server takes at most ",
                                                     limits.max_instances, " per request"));
  }

  InstanceReader reader(format->second, shape.instances_field(), shape.instances());
  Json::sax_parse(body.begin(), body.end(), &reader);  // stops after the instances
  RETURN_IF_ERROR(reader.status());
  PredictRequest request;
  request.format = &format->second;
  request.batches = reader.TakeBatches();
  request.size = shape.instances();
  return request;
}

}  // namespace tessera::cli
