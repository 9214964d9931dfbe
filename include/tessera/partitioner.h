// Partitioners: how many shards a variable of a given (shape, dtype) is split into.
//
// A partitioner returns the number of shards per axis (TF's convention); Tessera only ever splits
// axis 0, so a valid result is [n, 1, 1, ...] with n >= 1. The built-in partitioners follow
// docs/design.md §3 (TF's FixedShardsPartitioner, MinSizePartitioner and MaxSizePartitioner, same
// formulas and defaults); a custom one is any function (shape, dtype) -> shards per axis, whose
// results are validated before use.
//
// `Partitioner` is an immutable value wrapping one of these plus a description string that
// round-trips through ParsePartitioner ("fixed:4", "min_size:262144:4", "max_size:1024:none"),
// so drivers can take it as a flag and logs can print it.
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(Partitioner p, ParsePartitioner("min_size:4:2"));
//   TESSERA_ASSIGN_OR_RETURN(int64_t shards, NumShards(p, Shape{6, 1}, DType::kFloat32));  // 2
//
// Thread-safety: a Partitioner is immutable; concurrent calls are safe as long as a custom
// function is safe to call concurrently (the built-in ones are pure).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tessera/tensor.h"

namespace tessera {

// TF's MinSizePartitioner default: 256 KiB per shard.
inline constexpr int64_t kDefaultMinShardBytes = 256 << 10;
// TF's estimate of the size of one string element.
inline constexpr int64_t kDefaultBytesPerString = 16;

// A custom partitioner: shards per axis for a variable of `shape` and `dtype`. NumShards only
// calls it for rank >= 1 and rows >= 1; Partitioner::Partition passes any shape. Its result must
// have one entry per axis, the first >= 1 and all others exactly 1; anything else is reported by
// Partitioner::Partition.
using PartitionerFn = std::function<std::vector<int64_t>(const Shape& shape, DType dtype)>;

class Partitioner {
 public:
  // "none": never partitions (one shard per axis), the same as FixedShardsPartitioner(1).
  Partitioner();

  // Shards per axis for `shape` and `dtype`, validated: InvalidArgument naming this partitioner,
  // the shape and the result when the result's length differs from shape.rank(), its first
  // entry is < 1, or any other entry is not 1. The first entry is not capped here (NumShards
  // caps it at the row count).
  absl::StatusOr<std::vector<int64_t>> Partition(const Shape& shape, DType dtype) const;

  // "none", "fixed:4", "min_size:262144:1", "min_size:4:2:32" (bytes_per_string when not 16),
  // "max_size:1024:none", "max_size:1024:8:32", or a custom partitioner's own description.
  const std::string& description() const { return description_; }

 private:
  friend absl::StatusOr<Partitioner> CustomPartitioner(PartitionerFn fn, std::string description);
  Partitioner(PartitionerFn fn, std::string description)
      : fn_(std::move(fn)), description_(std::move(description)) {}

  PartitionerFn fn_;
  std::string description_;
};

// TF's FixedShardsPartitioner: min(num_shards, rows) shards (1, not TF's 0, when rows == 0).
// InvalidArgument when num_shards < 1.
absl::StatusOr<Partitioner> FixedShardsPartitioner(int64_t num_shards);

// TF's MinSizePartitioner: shards of at least `min_shard_bytes`, at most `max_shards` of them:
// max(1, min(rows, max_shards, ceil(total_bytes / min_shard_bytes))), where total_bytes counts
// `bytes_per_string` per element of a string variable.
// InvalidArgument when any argument is < 1.
absl::StatusOr<Partitioner> MinSizePartitioner(int64_t min_shard_bytes = kDefaultMinShardBytes,
                                               int64_t max_shards = 1,
                                               int64_t bytes_per_string = kDefaultBytesPerString);

// TF's MaxSizePartitioner: shards of at most `max_shard_bytes` where possible. Rows per shard
// max(1, floor(max_shard_bytes / bytes_per_row)); shards ceil(rows / rows_per_shard), capped by
// `max_shards` when given (the cap wins over the byte limit). A variable with zero-sized rows
// gets one shard. InvalidArgument when an argument (max_shards included, when given) is < 1.
absl::StatusOr<Partitioner> MaxSizePartitioner(int64_t max_shard_bytes,
                                               std::optional<int64_t> max_shards = std::nullopt,
                                               int64_t bytes_per_string = kDefaultBytesPerString);

// A user-defined partitioner. `description` names it in errors and logs ("custom" by default);
// it cannot be parsed back. InvalidArgument when `fn` is empty or `description` is empty.
absl::StatusOr<Partitioner> CustomPartitioner(PartitionerFn fn, std::string description = "custom");

// Parses a driver flag: "none" | "fixed:N" | "min_size:BYTES[:MAX[:BYTES_PER_STRING]]" |
// "max_size:BYTES[:MAX|none[:BYTES_PER_STRING]]". Omitted fields take TF's defaults (min_size
// MAX = 1, max_size MAX = none, BYTES_PER_STRING = 16). Every built-in description parses back
// to a partitioner with the same description and results. InvalidArgument naming the spec for an
// unknown kind, a wrong number of fields, a field that is not an integer, or a value the factory
// rejects.
absl::StatusOr<Partitioner> ParsePartitioner(absl::string_view spec);

// The number of axis-0 shards of a variable of `shape` and `dtype` under `partitioner`.
// A scalar (rank 0) and a variable with no rows (rows == 0) are never partitioned: both get 1
// shard without consulting the partitioner (an empty variable is one empty shard, never zero
// shards). Otherwise the validated axis-0 result, capped at the row count as TF's
// ParameterServerStrategy does, so every shard holds at least one row.
// Errors: those of Partitioner::Partition.
absl::StatusOr<int64_t> NumShards(const Partitioner& partitioner, const Shape& shape, DType dtype);

}  // namespace tessera
