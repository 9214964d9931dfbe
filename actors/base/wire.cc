#include "actors/base/wire.h"

#include <algorithm>
#include <caf/binary_deserializer.hpp>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"

namespace tessera {
namespace wire {
namespace {

// Floats and int64s are written in host byte order (Note [Bulk tensor payloads]); every node
// Tessera supports is little-endian, and this makes a port to a big-endian host fail loudly.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format assumes little-endian");

caf::error WireError(absl::string_view message) {
  return StatusToError(absl::DataLossError(absl::StrCat("malformed message: ", message)));
}

// Reads `count` raw values into `out` (see Note [Bulk tensor payloads] for the bound on memory).
template <class T>
caf::error ReadRaw(caf::deserializer& source, int64_t count, std::vector<T>& out,
                   absl::string_view what) {
  out.clear();
  if (count == 0) return caf::none;
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  if (auto* binary = dynamic_cast<caf::binary_deserializer*>(&source)) {
    if (binary->remaining() < bytes) {
      return WireError(
          absl::StrCat(what, " needs ", bytes, " bytes but only ", binary->remaining(), " remain"));
    }
    out.resize(count);
    return source.apply_raw(bytes, out.data());
  }
  constexpr int64_t kChunk = (int64_t{1} << 20) / sizeof(T);  // 1 MiB per read
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kChunk, count - done);
    out.resize(done + n);
    if (auto err = source.apply_raw(n * sizeof(T), out.data() + done)) return err;
    done += n;
  }
  return caf::none;
}

}  // namespace

caf::error SaveShape(caf::serializer& sink, const Shape& shape) {
  size_t rank = shape.dims().size();
  if (auto err = sink.begin_sequence(rank)) return err;
  for (int64_t dim : shape.dims()) {
    if (auto err = sink.apply(dim)) return err;
  }
  return sink.end_sequence();
}

caf::error LoadShape(caf::deserializer& source, Shape& shape) {
  size_t rank = 0;
  if (auto err = source.begin_sequence(rank)) return err;
  if (rank > static_cast<size_t>(kMaxRank)) {
    return WireError(absl::StrCat("shape of rank ", rank, " (at most ", kMaxRank, ")"));
  }
  std::vector<int64_t> dims(rank);
  for (int64_t& dim : dims) {
    if (auto err = source.apply(dim)) return err;
  }
  if (auto err = source.end_sequence()) return err;
  int64_t elements = 1;
  for (int64_t dim : dims) {
    if (dim < 0 || __builtin_mul_overflow(elements, dim, &elements)) {
      return WireError(absl::StrCat("shape ", Shape(dims).ToString(),
                                    " has a negative dimension or too many elements"));
    }
  }
  shape = Shape(std::move(dims));
  return caf::none;
}

caf::error SaveTensor(caf::serializer& sink, ConstTensorView tensor) {
  if (auto err = SaveShape(sink, tensor.shape())) return err;
  if (tensor.size() == 0) return caf::none;
  return sink.apply_raw(static_cast<size_t>(tensor.size()) * sizeof(float),
                        const_cast<float*>(tensor.data()));
}

caf::error LoadTensor(caf::deserializer& source, Tensor& tensor) {
  Shape shape;
  if (auto err = LoadShape(source, shape)) return err;
  const int64_t elements = shape.num_elements();
  if (elements > kMaxElements) {
    return WireError(absl::StrCat("tensor of shape ", shape.ToString(), " has more than ",
                                  kMaxElements, " elements"));
  }
  // From a buffer (the network's case): one copy straight into the tensor, nothing zeroed first.
  if (auto* binary = dynamic_cast<caf::binary_deserializer*>(&source); binary != nullptr) {
    const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
    if (binary->remaining() < bytes) {
      return WireError(absl::StrCat("tensor ", shape.ToString(), " needs ", bytes,
                                    " bytes but only ", binary->remaining(), " remain"));
    }
    if (elements > 0) {
      tensor = Tensor::Copy(ConstTensorView(
          reinterpret_cast<const float*>(binary->remainder().data()), std::move(shape)));
      binary->skip(bytes);
    } else {
      tensor = Tensor(std::move(shape));
    }
    return caf::none;
  }
  std::vector<float> values;
  if (auto err = ReadRaw(source, elements, values, absl::StrCat("tensor ", shape.ToString()))) {
    return err;
  }
  auto loaded = Tensor::FromVector(std::move(shape), std::move(values));
  if (!loaded.ok()) return StatusToError(absl::DataLossError(loaded.status().message()));
  tensor = std::move(loaded).value();
  return caf::none;
}

caf::error SaveIds(caf::serializer& sink, const Ids& ids) {
  size_t count = ids.size();
  // CAF 0.17 writes sequence sizes as 32 bits.
  if (count > UINT32_MAX) return WireError(absl::StrCat("id list of ", count, " ids is too long"));
  if (auto err = sink.begin_sequence(count)) return err;
  if (count > 0) {
    if (auto err = sink.apply_raw(count * sizeof(int64_t), const_cast<int64_t*>(ids.data()))) {
      return err;
    }
  }
  return sink.end_sequence();
}

caf::error LoadIds(caf::deserializer& source, Ids& ids) {
  size_t count = 0;
  if (auto err = source.begin_sequence(count)) return err;
  if (count > static_cast<size_t>(kMaxElements)) {
    return WireError(absl::StrCat("id list of ", count, " ids (at most ", kMaxElements, ")"));
  }
  if (auto err = ReadRaw(source, static_cast<int64_t>(count), ids,
                         absl::StrCat("id list of ", count, " ids"))) {
    return err;
  }
  return source.end_sequence();
}

caf::error BadVariantIndex(absl::string_view what, int32_t index) {
  return WireError(absl::StrCat("a ", what, " of unknown kind ", index));
}

caf::error SaveClosureValues(caf::serializer& sink, const ClosureValues& values) {
  size_t count = values.size();
  if (auto err = sink.begin_sequence(count)) return err;
  for (const auto& [name, value] : values.values()) {
    std::string key = name;
    uint8_t tag = static_cast<uint8_t>(value.index());
    if (auto err = sink(key, tag)) return err;
    caf::error err = std::visit(
        [&sink](const auto& v) -> caf::error {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, Tensor>) {
            return SaveTensor(sink, v);
          } else {
            T copy = v;
            return sink(copy);
          }
        },
        value);
    if (err) return err;
  }
  return sink.end_sequence();
}

namespace {

// Reads one value of type T into values[name].
template <class T>
caf::error LoadClosureValue(caf::deserializer& source, std::string name, ClosureValues& values) {
  T value{};
  if constexpr (std::is_same_v<T, Tensor>) {
    if (auto err = LoadTensor(source, value)) return err;
  } else {
    if (auto err = source(value)) return err;
  }
  values.Set(std::move(name), std::move(value));
  return caf::none;
}

// A name from the wire, fit for an error message (it may be anything, of any length).
std::string Printable(absl::string_view name) {
  constexpr size_t kShown = 64;
  return absl::StrCat("\"", absl::CHexEscape(name.substr(0, kShown)),
                      name.size() > kShown ? "..." : "", "\"");
}

}  // namespace

caf::error LoadClosureValues(caf::deserializer& source, ClosureValues& values) {
  values = ClosureValues();
  size_t count = 0;
  if (auto err = source.begin_sequence(count)) return err;
  // Nothing is reserved for `count`: a forged count runs out of bytes at the first missing value.
  for (size_t i = 0; i < count; ++i) {
    std::string name;
    uint8_t tag = 0;
    if (auto err = source(name, tag)) return err;
    if (values.Has(name)) {
      return WireError(absl::StrCat("closure value ", Printable(name), " appears twice"));
    }
    caf::error err;
    switch (tag) {
      case static_cast<uint8_t>(ClosureValueType::kInt64):
        err = LoadClosureValue<int64_t>(source, std::move(name), values);
        break;
      case static_cast<uint8_t>(ClosureValueType::kDouble):
        err = LoadClosureValue<double>(source, std::move(name), values);
        break;
      case static_cast<uint8_t>(ClosureValueType::kString):
        err = LoadClosureValue<std::string>(source, std::move(name), values);
        break;
      case static_cast<uint8_t>(ClosureValueType::kTensor):
        err = LoadClosureValue<Tensor>(source, std::move(name), values);
        break;
      default:
        return WireError(absl::StrCat("closure value ", Printable(name), " has type tag ",
                                      static_cast<int>(tag), " (known: 0..",
                                      kNumClosureValueTypes - 1, ")"));
    }
    if (err) return err;
  }
  return source.end_sequence();
}

caf::error SaveRingValues(caf::serializer& sink, const RingValues& values) {
  if (auto err = SaveShape(sink, Shape{values.size()})) return err;
  if (values.size() == 0) return caf::none;
  return sink.apply_raw(static_cast<size_t>(values.size()) * sizeof(float),
                        const_cast<float*>(values.span().data()));
}

caf::error LoadRingValues(caf::deserializer& source, RingValues& values) {
  Tensor loaded;
  if (auto err = LoadTensor(source, loaded)) return err;
  if (loaded.shape().rank() != 1) {
    return StatusToError(absl::DataLossError(absl::StrCat(
        "a ring message carries values of shape ", loaded.shape().ToString(), ", not a vector")));
  }
  values = RingValues::Own(std::move(loaded));
  return caf::none;
}

}  // namespace wire
}  // namespace tessera
