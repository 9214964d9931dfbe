// ClosureValues: the arguments and results of a closure — named, typed values that serialize,
// so a closure can travel to a worker in another process unchanged (docs/design.md §2: replica
// functions are registered by name).
//
// Each value is an int64, a double, a string or a Tensor, under a name; a name holds one value.
//
// Example:
//   ClosureValues args;
//   args.Set("batch", int64_t{7}).Set("learning_rate", 0.1);
//   ...
//   TESSERA_ASSIGN_OR_RETURN(int64_t batch, args.Get<int64_t>("batch"));
//   args.Get<double>("batch");  // InvalidArgument: ... "batch" holds an int64, not a double
//
// Thread-safety: a value; const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tessera/tensor.h"

namespace tessera {

// The types a closure value holds. The numbers are the type tags on the wire: never renumber.
enum class ClosureValueType : uint8_t { kInt64 = 0, kDouble = 1, kString = 2, kTensor = 3 };
inline constexpr int kNumClosureValueTypes = 4;

// "int64", "double", "string", "tensor".
absl::string_view ClosureValueTypeName(ClosureValueType type);

// One value; the alternative's index is its ClosureValueType.
using ClosureValue = std::variant<int64_t, double, std::string, Tensor>;

template <class T>
inline constexpr bool kIsClosureValueType =
    std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, std::string> ||
    std::is_same_v<T, Tensor>;

// The ClosureValueType of T, one of the four types a closure value holds.
template <class T>
constexpr ClosureValueType ClosureValueTypeOf() {
  static_assert(kIsClosureValueType<T>,
                "a closure value is an int64_t, a double, a std::string or a Tensor");
  if constexpr (std::is_same_v<T, int64_t>) {
    return ClosureValueType::kInt64;
  } else if constexpr (std::is_same_v<T, double>) {
    return ClosureValueType::kDouble;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return ClosureValueType::kString;
  } else {
    return ClosureValueType::kTensor;
  }
}

class ClosureValues {
 public:
  // Sets `name` to `value`, replacing what it held (of any type). Returns *this, so sets chain.
  // An int is stored as an int64; a bool is refused at compile time (say int64_t{0 or 1}).
  ClosureValues& Set(std::string name, int64_t value);
  ClosureValues& Set(std::string name, int32_t value) {
    return Set(std::move(name), int64_t{value});
  }
  ClosureValues& Set(std::string name, double value);
  ClosureValues& Set(std::string name, std::string value);
  ClosureValues& Set(std::string name, const char* value) {
    return Set(std::move(name), std::string(value));
  }
  ClosureValues& Set(std::string name, Tensor value);
  ClosureValues& Set(std::string name, bool value) = delete;

  // The value of `name` as T (int64_t, double, std::string or Tensor). InvalidArgument naming
  // `name` and T when there is none, or naming the type it holds when that is not T.
  template <class T>
  absl::StatusOr<T> Get(absl::string_view name) const {
    absl::StatusOr<const ClosureValue*> value = Find(name, ClosureValueTypeOf<T>());
    if (!value.ok()) return value.status();
    return std::get<T>(**value);
  }

  // Whether `name` holds a value (of any type).
  bool Has(absl::string_view name) const { return values_.find(name) != values_.end(); }
  // The type `name` holds. InvalidArgument naming `name` when it holds none.
  absl::StatusOr<ClosureValueType> TypeOf(absl::string_view name) const;
  // Removes `name`; false when it held nothing.
  bool Erase(absl::string_view name);

  bool empty() const { return values_.empty(); }
  size_t size() const { return values_.size(); }
  // Every value by name, in name order (the order they travel in).
  const std::map<std::string, ClosureValue, std::less<>>& values() const { return values_; }

 private:
  // The value of `name` when it holds a `type`; Get's errors otherwise.
  absl::StatusOr<const ClosureValue*> Find(absl::string_view name, ClosureValueType type) const;

  std::map<std::string, ClosureValue, std::less<>> values_;
};

}  // namespace tessera
