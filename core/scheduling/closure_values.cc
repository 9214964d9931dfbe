#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessera/closure.h"

namespace tessera {
namespace {

ClosureValueType TypeOfValue(const ClosureValue& value) {
  return static_cast<ClosureValueType>(value.index());
}

// "batch (int64), loss (double)", or "none" — what an error says the closure does hold.
std::string Held(const std::map<std::string, ClosureValue, std::less<>>& values) {
  if (values.empty()) return "none";
  return absl::StrJoin(values, ", ", [](std::string* out, const auto& entry) {
    absl::StrAppend(out, entry.first, " (", ClosureValueTypeName(TypeOfValue(entry.second)), ")");
  });
}

// "an int64", "a double", ...
std::string WithArticle(ClosureValueType type) {
  return absl::StrCat(type == ClosureValueType::kInt64 ? "an " : "a ", ClosureValueTypeName(type));
}

}  // namespace

absl::string_view ClosureValueTypeName(ClosureValueType type) {
  switch (type) {
    case ClosureValueType::kInt64: return "int64";
    case ClosureValueType::kDouble: return "double";
    case ClosureValueType::kString: return "string";
    case ClosureValueType::kTensor: return "tensor";
  }
  return "invalid";
}

ClosureValues& ClosureValues::Set(std::string name, int64_t value) {
  values_.insert_or_assign(std::move(name), ClosureValue(std::in_place_type<int64_t>, value));
  return *this;
}

ClosureValues& ClosureValues::Set(std::string name, double value) {
  values_.insert_or_assign(std::move(name), ClosureValue(std::in_place_type<double>, value));
  return *this;
}

ClosureValues& ClosureValues::Set(std::string name, std::string value) {
  values_.insert_or_assign(std::move(name),
                           ClosureValue(std::in_place_type<std::string>, std::move(value)));
  return *this;
}

ClosureValues& ClosureValues::Set(std::string name, Tensor value) {
  values_.insert_or_assign(std::move(name),
                           ClosureValue(std::in_place_type<Tensor>, std::move(value)));
  return *this;
}

absl::StatusOr<const ClosureValue*> ClosureValues::Find(absl::string_view name,
                                                       ClosureValueType type) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("closure value \"", name, "\" (",
                                                   ClosureValueTypeName(type),
                                                   ") is missing; the closure has ",
                                                   Held(values_)));
  }
  if (TypeOfValue(it->second) != type) {
    return absl::InvalidArgumentError(absl::StrCat(
        "closure value \"", name, "\" holds ", WithArticle(TypeOfValue(it->second)), ", not ",
        WithArticle(type)));
  }
  return &it->second;
}

absl::StatusOr<ClosureValueType> ClosureValues::TypeOf(absl::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("closure value \"", name, "\" is missing; the closure has ", Held(values_)));
  }
  return TypeOfValue(it->second);
}

bool ClosureValues::Erase(absl::string_view name) {
  auto it = values_.find(name);
  if (it == values_.end()) return false;
  values_.erase(it);
  return true;
}

}  // namespace tessera
