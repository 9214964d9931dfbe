#include "serving/json_sax.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessera/status.h"

namespace tessera::serving {

const char* JsonKindName(JsonKind kind) {
  switch (kind) {
    case JsonKind::kNull:
      return "null";
    case JsonKind::kBoolean:
      return "a boolean";
    case JsonKind::kInteger:
      return "an integer";
    case JsonKind::kNumber:
      return "a number";
    case JsonKind::kString:
      return "a string";
    case JsonKind::kArray:
      return "an array";
    case JsonKind::kObject:
      return "an object";
    case JsonKind::kBinary:
      break;
  }
  return "an unsupported value";
}

std::string ShownName(const std::string& name) {
  constexpr size_t kMax = 64;
  return name.size() <= kMax ? name : absl::StrCat(name.substr(0, kMax), "...");
}

int64_t MaxValues(const InstanceFormat& format) {
  int64_t values = 1;
  for (const InstanceFormat::Input& input : format.inputs) {
    values += 1 + (input.kind == InputKind::kDense    ? input.width
                   : input.kind == InputKind::kIdList ? 2 * kMaxIdsPerList + 4
                                                      : 0);
  }
  return 2 * values + 16;
}

bool ValueBuilder::Add(Json value) {
  if (++values_ > max_values_) return false;
  const bool container = value.is_structured();
  Json* slot;
  if (stack_.empty()) {
    value_ = std::move(value);
    slot = &value_;
  } else if (Json& parent = *stack_.back(); parent.is_array()) {
    parent.push_back(std::move(value));
    slot = &parent.back();
  } else {
    slot = &parent[key_];
    *slot = std::move(value);
  }
  started_ = true;
  if (container) stack_.push_back(slot);
  return true;
}

Json ValueBuilder::Take() {
  Json value = std::move(value_);
  value_ = Json();
  stack_.clear();
  values_ = 0;
  started_ = false;
  return value;
}

absl::Status ValueBuilder::TooLarge(absl::string_view what, const InstanceFormat& format) const {
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": more than ", max_values_, " values; the signature's inputs are ",
      absl::StrJoin(format.inputs, ", ", [](std::string* out, const InstanceFormat::Input& input) {
        absl::StrAppend(out, input.name);
      })));
}

bool RowReader::start_array(std::size_t) {
  if (depth_ == 1 && key_ == field_) {
    in_field_ = occurrences_ == occurrence_;
    ++depth_;
    return true;
  }
  return Open(Json::array());
}

bool RowReader::end_array() {
  if (depth_ == 2 && in_field_) return false;  // every element is in: stop reading
  return Close();
}

bool RowReader::key(Json::string_t& key) {
  if (building()) {
    value_.Key(std::move(key));
  } else if (depth_ == 1) {
    key_ = key;
    if (key_ == field_) ++occurrences_;
  }
  return true;
}

bool RowReader::parse_error(std::size_t, const std::string&,
                            const nlohmann::detail::exception& error) {
  status_ = MalformedJsonError(error);  // pass 1 read the same text, so this does not happen
  return false;
}

bool RowReader::Open(Json container) {
  if (building() && !value_.Add(std::move(container))) {
    status_ = value_.TooLarge(absl::StrCat(label_, " ", index_), format_);
    return false;
  }
  ++depth_;
  return true;
}

bool RowReader::Close() {
  --depth_;
  if (!building()) return true;
  value_.Close();
  return value_.complete() ? Finish() : true;
}

bool RowReader::Put(Json value) {
  if (!building()) return true;
  if (!value_.Add(std::move(value))) {
    status_ = value_.TooLarge(absl::StrCat(label_, " ", index_), format_);
    return false;
  }
  return value_.complete() ? Finish() : true;
}

bool RowReader::Finish() {
  const int64_t index = index_++;
  status_ = Annotate(row_(value_.Take(), index), absl::StrCat(label_, " ", index));
  return status_.ok();
}

}  // namespace tessera::serving
