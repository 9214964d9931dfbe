#include "serving/example_request.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "serving/classify_signatures.h"
#include "serving/json.h"
#include "serving/json_sax.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

using string_t = Json::string_t;
using binary_t = Json::binary_t;

// Values a "context" may hold while its signature is not known yet (more: refused).
constexpr int64_t kMaxContextValues = int64_t{1} << 16;

std::string InputList(const InstanceFormat& format) {
  return absl::StrJoin(format.inputs, ", ", [](std::string* out, const InstanceFormat::Input& in) {
    absl::StrAppend(out, in.name);
  });
}

// Pass 1: the request's shape — the kind of the whole, its fields, the signature name, the kind
// and length of the last "examples" — and the last "context" as a small tree.
class ExampleShape {
 public:
  bool null() { return Scalar(JsonKind::kNull, Json(nullptr)); }
  bool boolean(bool value) { return Scalar(JsonKind::kBoolean, Json(value)); }
  bool number_integer(Json::number_integer_t value) {
    return Scalar(JsonKind::kInteger, Json(value));
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    return Scalar(JsonKind::kInteger, Json(value));
  }
  bool number_float(Json::number_float_t value, const string_t&) {
    return Scalar(JsonKind::kNumber, Json(value));
  }
  bool string(string_t& value) {
    if (depth_ == 1 && key_ == "signature_name") signature_ = value;
    return Scalar(JsonKind::kString, Json(value));
  }
  bool binary(binary_t&) { return Scalar(JsonKind::kBinary, Json()); }
  bool start_object(std::size_t) { return Open(JsonKind::kObject, Json::object()); }
  bool start_array(std::size_t) {
    if (depth_ == 1 && key_ == "examples") in_examples_ = true;
    return Open(JsonKind::kArray, Json::array());
  }
  bool end_object() { return Close(); }
  bool end_array() {
    if (depth_ == 2) in_examples_ = false;
    return Close();
  }
  bool key(string_t& key) {
    if (in_context_) {
      if (context_ok_) context_.Key(std::move(key));
      return true;
    }
    if (depth_ != 1) return true;
    key_ = key;
    if (key_ == "examples") {
      ++examples_fields_;
    } else if (key_ != "signature_name" && key_ != "context" &&
               (bad_field_.empty() || key_ < bad_field_)) {
      bad_field_ = key_;
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    error_ = MalformedJsonError(error);
    return false;
  }

  absl::Status Check(InstanceFormat::Method method) const {
    if (top_ != JsonKind::kObject) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the request must be a JSON object with \"examples\", got ", JsonKindName(top_)));
    }
    if (!bad_field_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown field \"", ShownName(bad_field_), "\"; a ", MethodName(method),
          " request has \"examples\" and optionally \"context\" and \"signature_name\""));
    }
    if (signature_kind_.has_value() && *signature_kind_ != JsonKind::kString) {
      return absl::InvalidArgumentError(absl::StrCat("\"signature_name\" must be a string, got ",
                                                     JsonKindName(*signature_kind_)));
    }
    if (examples_fields_ == 0) {
      return absl::InvalidArgumentError(absl::StrCat("the request has no \"examples\" (a ",
                                                     MethodName(method),
                                                     " request lists its examples there)"));
    }
    if (examples_kind_ != JsonKind::kArray || examples_ == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"examples\" must be a non-empty array, got ",
          examples_kind_ == JsonKind::kArray ? "an empty array" : JsonKindName(examples_kind_)));
    }
    if (context_kind_.has_value() && *context_kind_ != JsonKind::kObject) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"context\" must be an object mapping features to values, got ",
                       JsonKindName(*context_kind_)));
    }
    if (!context_ok_) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"context\" holds more than ", kMaxContextValues, " values"));
    }
    return absl::OkStatus();
  }

  const absl::Status& error() const { return error_; }
  const std::optional<std::string>& signature() const { return signature_; }
  int examples_field() const { return examples_fields_; }
  int64_t examples() const { return examples_; }
  // The context (an object), or null without one.
  Json TakeContext() { return context_kind_.has_value() ? context_.Take() : Json(); }

 private:
  bool Scalar(JsonKind kind, Json value) {
    Value(kind);
    if (in_context_ && context_ok_) context_ok_ = context_.Add(std::move(value));
    return true;
  }

  bool Open(JsonKind kind, Json container) {
    Value(kind);
    if (depth_ == 1 && key_ == "context" && kind == JsonKind::kObject) {
      context_.Take();  // a later "context" replaces an earlier one
      context_ok_ = context_.Add(std::move(container));
      in_context_ = true;
    } else if (in_context_ && context_ok_) {
      context_ok_ = context_.Add(std::move(container));
    }
    ++depth_;
    return true;
  }

  bool Close() {
    --depth_;
    if (in_context_) {
      if (context_ok_) context_.Close();
      if (depth_ == 1) in_context_ = false;
    }
    return true;
  }

  void Value(JsonKind kind) {
    if (depth_ == 0) {
      top_ = kind;
    } else if (depth_ == 1) {
      if (key_ == "examples") {
        examples_kind_ = kind;
        examples_ = 0;
      } else if (key_ == "signature_name") {
        signature_kind_ = kind;
        if (kind != JsonKind::kString) signature_.reset();
      } else if (key_ == "context") {
        context_kind_ = kind;
        context_ok_ = true;
      }
    } else if (depth_ == 2 && in_examples_) {
      ++examples_;
    }
  }

  int64_t depth_ = 0;
  std::string key_;
  JsonKind top_ = JsonKind::kNull;
  std::optional<JsonKind> signature_kind_;
  std::optional<std::string> signature_;
  std::string bad_field_;
  int examples_fields_ = 0;
  bool in_examples_ = false;
  JsonKind examples_kind_ = JsonKind::kNull;
  int64_t examples_ = 0;
  std::optional<JsonKind> context_kind_;
  ValueBuilder context_{kMaxContextValues};
  bool in_context_ = false;
  bool context_ok_ = true;  // the context fits in kMaxContextValues
  absl::Status error_;
};

// The signature a request of `method` uses.
absl::StatusOr<const InstanceFormat*> ChooseSignature(
    const std::map<std::string, InstanceFormat>& formats, InstanceFormat::Method method,
    const std::optional<std::string>& requested) {
  std::vector<std::string> of_method;
  for (const auto& [name, format] : formats) {
    if (format.method == method) of_method.push_back(name);
  }
  const std::string which =
      of_method.empty() ? "this model has none: only classifiers do (a sigmoid or softmax output "
                          "over their loss's logits)"
                        : absl::StrCat("this model's: ", absl::StrJoin(of_method, ", "));
  if (requested.has_value()) {
    auto it = formats.find(*requested);
    if (it == formats.end()) {
      std::vector<std::string> names;
      for (const auto& [name, format] : formats) names.push_back(name);
      return absl::InvalidArgumentError(absl::StrCat("unknown signature '", ShownName(*requested),
                                                     "'; the model's signatures are ",
                                                     absl::StrJoin(names, ", ")));
    }
    if (it->second.method != method) {
      return absl::InvalidArgumentError(absl::StrCat(
          "signature '", *requested, "' is a ", MethodName(it->second.method), " signature; :",
          MethodName(method), " needs a ", MethodName(method), " signature (", which, ")"));
    }
    return &it->second;
  }
  auto serving = formats.find(kServingDefault);
  if (serving != formats.end() && serving->second.method == method) return &serving->second;
  const char* own =
      method == InstanceFormat::Method::kClassify ? kClassificationSignature : kRegressionSignature;
  auto it = formats.find(own);
  if (it != formats.end() && it->second.method == method) return &it->second;
  if (of_method.size() == 1) return &formats.at(of_method[0]);
  return absl::InvalidArgumentError(absl::StrCat(":", MethodName(method), " needs a ",
                                                 MethodName(method), " signature; ", which));
}

// A feature's value as an instance holds it (instances.h): a list of one id unwrapped, a
// number for a dense input of width 1 wrapped, an id-list input's single id listed.
absl::StatusOr<Json> InstanceValue(const InstanceFormat::Input& input, Json value) {
  if (input.kind == InputKind::kIdList && !value.is_array() && !value.is_object()) {
    return Json::array({std::move(value)});
  }
  if (input.kind == InputKind::kIds && value.is_array()) {
    if (value.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("feature '", input.name,
                                                     "' must be one integer id (or a list of "
                                                     "one), got an array of ",
                                                     value.size()));
    }
    return std::move(value[0]);
  }
  if (input.kind == InputKind::kDense && input.width == 1 && value.is_number()) {
    return Json::array({std::move(value)});
  }
  return value;
}

const InstanceFormat::Input* FindInput(const InstanceFormat& format, const std::string& name) {
  for (const InstanceFormat::Input& input : format.inputs) {
    if (input.name == name) return &input;
  }
  return nullptr;
}

// The context's features as instance values, by name.
absl::StatusOr<std::map<std::string, Json>> ContextFeatures(const InstanceFormat& format,
                                                            Json context) {
  std::map<std::string, Json> features;
  if (context.is_null()) return features;
  for (auto& [name, value] : context.items()) {
    const InstanceFormat::Input* input = FindInput(format, name);
    if (input == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("context: unknown feature '", ShownName(name),
                                                     "'; the signature's inputs are ",
                                                     InputList(format)));
    }
    TESSERA_ASSIGN_OR_RETURN(Json instance_value, InstanceValue(*input, std::move(value)));
    features.emplace(name, std::move(instance_value));
  }
  // A context value is checked once, here, rather than in every example.
  for (const auto& [name, value] : features) {
    InputColumn column(*FindInput(format, name));
    TESSERA_RETURN_IF_ERROR(Annotate(column.Append(value), "context"));
  }
  return features;
}

}  // namespace

const char* MethodName(InstanceFormat::Method method) {
  switch (method) {
    case InstanceFormat::Method::kClassify:
      return "classify";
    case InstanceFormat::Method::kRegress:
      return "regress";
    case InstanceFormat::Method::kPredict:
      break;
  }
  return "predict";
}

absl::StatusOr<ExampleRequest> ReadExampleRequest(
    absl::string_view body, const std::map<std::string, InstanceFormat>& formats,
    InstanceFormat::Method method, const PredictLimits& limits) {
  ExampleShape shape;
  if (!Json::sax_parse(body.begin(), body.end(), &shape)) return shape.error();
  TESSERA_RETURN_IF_ERROR(shape.Check(method));
  TESSERA_ASSIGN_OR_RETURN(const InstanceFormat* format,
                           ChooseSignature(formats, method, shape.signature()));
  using Features = std::map<std::string, Json>;
  TESSERA_ASSIGN_OR_RETURN(const Features context, ContextFeatures(*format, shape.TakeContext()));
  if (shape.examples() > limits.max_instances) {
    return absl::ResourceExhaustedError(absl::StrCat("the request has ", shape.examples(),
                                                     " examples; this server takes at most ",
                                                     limits.max_instances, " per request"));
  }

  ExampleRequest request;
  request.format = format;
  request.size = shape.examples();
  BatchBuilder builder(*format);
  builder.Reserve(std::min(request.size, kInstancesPerBatch));
  RowReader reader("examples", shape.examples_field(), "example", *format,
                   [&](Json example, int64_t index) -> absl::Status {
                     if (!example.is_object()) {
                       return absl::InvalidArgumentError(absl::StrCat(
                           "an example must be an object mapping features to values, got ",
                           JsonTypeName(example)));
                     }
                     Json instance = Json::object();
                     for (auto& [name, value] : example.items()) {
                       const InstanceFormat::Input* input = FindInput(*format, name);
                       if (input == nullptr) {
                         return absl::InvalidArgumentError(
                             absl::StrCat("unknown feature '", ShownName(name),
                                          "'; the signature's inputs are ", InputList(*format)));
                       }
                       if (context.count(name) != 0) {
                         return absl::InvalidArgumentError(
                             absl::StrCat("feature '", name, "' is in \"context\" too"));
                       }
                       TESSERA_ASSIGN_OR_RETURN(instance[name],
                                                InstanceValue(*input, std::move(value)));
                     }
                     for (const auto& [name, value] : context) instance[name] = value;
                     TESSERA_RETURN_IF_ERROR(builder.Add(instance));
                     if (builder.size() == kInstancesPerBatch) {
                       request.batches.push_back(builder.Take());
                       builder.Reserve(std::min(request.size - index - 1, kInstancesPerBatch));
                     }
                     return absl::OkStatus();
                   });
  Json::sax_parse(body.begin(), body.end(), &reader);  // stops after the examples
  TESSERA_RETURN_IF_ERROR(reader.status());
  if (builder.size() > 0) request.batches.push_back(builder.Take());
  return request;
}

}  // namespace tessera::serving
