// Initializers: fill one row block of a variable from (full shape, row offset, block shape)
// without ever building the full value.
//
// Values depend only on (seed, global element position): a variable initialized as one block and
// the same variable initialized as 2, 3 or 7 shards are identical element for element
// (docs/design.md §3, better than TF). The randomness is Philox (core/base/random.h), keyed by the
// seed and counted by the element's global flat index.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/tensor.h"

namespace tessera {

// Names an initializer and its parameters; serializable (model graphs and shard placement
// messages carry it, so a PS node can initialize a shard from it).
//
//   name               params (defaults)
//   zeros, ones        -
//   constant           value (0)
//   random_uniform     minval (-0.05), maxval (0.05)          Keras' defaults
//   random_normal      mean (0), stddev (0.05)
//   truncated_normal   mean (0), stddev (0.05)                resampled beyond 2 stddev
//   glorot_uniform     -                                      limit sqrt(6 / (fan_in + fan_out))
struct InitializerSpec {
  std::string name;
  std::map<std::string, double> params;
  uint64_t seed = 0;
};

// InvalidArgument for an unknown name, an unknown parameter or an invalid value (maxval <=
// minval, stddev < 0).
absl::Status ValidateInitializer(const InitializerSpec& spec);

// The initializer seed of parameter number `index` of a model seeded `model_seed`: 64 Philox
// bits of (model_seed, index), so distinct parameters get unrelated streams. Part of what a
// model seed means: never change it.
uint64_t DeriveParamSeed(uint64_t model_seed, int64_t index);

// Fills `block`, the rows [row_offset, row_offset + block.rows()) of a variable of `full_shape`.
// InvalidArgument when the spec is invalid, or the block's trailing dims differ from
// full_shape's, or the rows fall outside full_shape.
absl::Status InitializeBlock(const InitializerSpec& spec, const Shape& full_shape,
                             int64_t row_offset, TensorView block);

// Convenience: a new tensor holding rows [row_offset, row_offset + rows) of the variable.
absl::StatusOr<Tensor> MakeInitializedBlock(const InitializerSpec& spec, const Shape& full_shape,
                                            int64_t row_offset, int64_t rows);

}  // namespace tessera
