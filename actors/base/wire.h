// The wire machinery under Tessera's message types (actors/base/messages.h): how a tensor, an id
// list, a ring buffer and closure values travel as raw blocks (Note [Bulk tensor payloads]), and
// the wrappers the types' inspect overloads use for what CAF 0.17 cannot serialize itself (a
// std::variant, a std::optional).
//
// Loading validates before allocating: a negative or overflowing shape, an absurd size or a
// truncated buffer becomes a DataLoss error (a Tessera caf::error, actors/base/error.h), never a
// crash or a huge allocation.
//
// Thread-safety: free functions over the serializer they are given.
#pragma once

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/string_view.h"
#include "core/mirrored/collective.h"
#include "core/scheduling/closure.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

// Note [Bulk tensor payloads]
// CAF 0.17 serializes a std::vector<float> element by element (~110 MB/s); one apply_raw over a
// byte block is ~13x faster (docs/design.md §4). So a Tensor is written as its dims (rank, then
// int64 each) followed by rows * row_size float32 values as raw little-endian bytes, and an id list
// as its count followed by raw int64s. Loading first checks the dims against the one policy for
// tensors from outside (Note [Limits on tensors from outside], tessera/tensor.h) and, with a
// binary_deserializer, that the buffer still holds that many bytes; with any other deserializer it
// reads in bounded chunks, so memory grows only with bytes that actually arrived.
namespace wire {

caf::error SaveShape(caf::serializer& sink, const Shape& shape);
caf::error LoadShape(caf::deserializer& source, Shape& shape);
// A view saves as the Tensor of its values would.
caf::error SaveTensor(caf::serializer& sink, ConstTensorView tensor);
caf::error LoadTensor(caf::deserializer& source, Tensor& tensor);
caf::error SaveIds(caf::serializer& sink, const Ids& ids);
caf::error LoadIds(caf::deserializer& source, Ids& ids);

// Dispatches a bulk-payload type to its save / load function, or shows a summary for CAF's
// read-only inspectors (stringification).
template <class Inspector, class T, class Save, class Load, class Show>
typename Inspector::result_type Dispatch(Inspector& f, T& x, Save save, Load load, Show show) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    return save(static_cast<caf::serializer&>(f), x);
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    return load(static_cast<caf::deserializer&>(f), x);
  } else {
    static_assert(Inspector::reads_state, "unknown loading inspector for a bulk payload");
    return show(f, x);
  }
}

// An id list travels as one raw block (Note [Bulk tensor payloads]): wrap the member for the
// duration of one inspect call.
struct BulkIds {
  Ids* ids;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BulkIds& x) {
  return Dispatch(
      f, x, [](caf::serializer& s, BulkIds& b) { return SaveIds(s, *b.ids); },
      [](caf::deserializer& d, BulkIds& b) { return LoadIds(d, *b.ids); },
      [](Inspector& g, BulkIds& b) { return g(caf::meta::type_name("tessera::Ids"), *b.ids); });
}

// A std::variant travels as its alternative's index followed by the alternative. Loading an
// index out of range is DataLoss (a forged or newer message), never undefined behaviour.
template <class Variant, size_t... I>
void EmplaceAlternative(Variant& x, size_t index, std::index_sequence<I...>) {
  ((index == I ? (void)x.template emplace<I>() : (void)0), ...);
}

caf::error BadVariantIndex(absl::string_view what, int32_t index);

template <class Inspector, class... Ts>
typename Inspector::result_type InspectVariant(Inspector& f, std::variant<Ts...>& x,
                                               absl::string_view what) {
  if constexpr (Inspector::reads_state) {
    int32_t index = static_cast<int32_t>(x.index());
    return std::visit([&](auto& alternative) { return f(index, alternative); }, x);
  } else {
    int32_t index = 0;
    if (auto err = f(index)) return err;
    if (index < 0 || index >= static_cast<int32_t>(sizeof...(Ts))) {
      return BadVariantIndex(what, index);
    }
    EmplaceAlternative(x, static_cast<size_t>(index), std::index_sequence_for<Ts...>{});
    return std::visit([&](auto& alternative) { return f(alternative); }, x);
  }
}

// ClosureValues travel as their count, then per value (in name order) its name, its
// ClosureValueType as one tag byte and the value: an int64, a double, a string, or a tensor as in
// Note [Bulk tensor payloads]. Loading is the hostile-input path of every closure argument and
// result: an unknown tag, a name given twice or a malformed value is a DataLoss error, and a
// truncated buffer CAF's end-of-stream error.
caf::error SaveClosureValues(caf::serializer& sink, const ClosureValues& values);
caf::error LoadClosureValues(caf::deserializer& source, ClosureValues& values);

// Ring values travel as a rank-1 Tensor does (Note [Bulk tensor payloads]): written straight
// from the sender's buffer, loaded into storage of the message's own.
caf::error SaveRingValues(caf::serializer& sink, const RingValues& values);
caf::error LoadRingValues(caf::deserializer& source, RingValues& values);

// std::optional has no CAF 0.17 support: an optional OptimizerSpec travels as a flag and a
// value, put back by a load callback. Wrap the member for the duration of one inspect call.
struct OptionalOptimizer {
  std::optional<OptimizerSpec>* target;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, OptionalOptimizer& x) {
  bool has_value = x.target->has_value();
  OptimizerSpec value = has_value ? **x.target : OptimizerSpec{};
  auto put_back = caf::meta::load_callback([&]() -> caf::error {
    if (has_value) {
      *x.target = std::move(value);
    } else {
      x.target->reset();
    }
    return caf::none;
  });
  return f(caf::meta::type_name("tessera::OptionalOptimizer"), has_value, value, put_back);
}

}  // namespace wire
}  // namespace tessera
