#include "tessera/partitioner.h"

#include <algorithm>
#include <utility>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Note [Partitioner arithmetic]
// Byte counts are computed in 128 bits so that no shape overflows them: rows < 2^63 and the
// bytes per row saturate at 2^64, so rows * bytes_per_row < 2^127. Saturating the row size is
// harmless: a row of >= 2^64 bytes already exceeds every int64 byte limit, so both formulas
// reach their row-count or max_shards cap. Integer ceil/floor match TF's float formulas
// exactly for all inputs TF handles without rounding.
constexpr absl::uint128 kSaturatedRowBytes = absl::uint128(1) << 64;

// Bytes of one axis-0 row of `shape` (rank >= 1), saturating at 2^64.
absl::uint128 BytesPerRow(const Shape& shape, int64_t element_bytes) {
  for (int i = 1; i < shape.rank(); ++i) {
    if (shape.dim(i) == 0) return 0;
  }
  absl::uint128 bytes = static_cast<uint64_t>(element_bytes);
  for (int i = 1; i < shape.rank(); ++i) {
    bytes *= static_cast<uint64_t>(shape.dim(i));
    if (bytes >= kSaturatedRowBytes) return kSaturatedRowBytes;
  }
  return bytes;
}

// [axis0, 1, 1, ...] of length rank; [] for a scalar, which has no axis to split.
std::vector<int64_t> AxisZeroShards(const Shape& shape, int64_t axis0) {
  std::vector<int64_t> result(shape.rank(), 1);
  if (!result.empty()) result[0] = axis0;
  return result;
}

int64_t CapToInt64(absl::uint128 value, int64_t cap) {
  return value >= static_cast<uint64_t>(cap) ? cap
                                             : static_cast<int64_t>(absl::Uint128Low64(value));
}

absl::Status CheckPositive(int64_t value, absl::string_view partitioner, absl::string_view arg) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(partitioner, ": ", arg, " must be >= 1, got ", value));
}

std::string BytesPerStringSuffix(int64_t bytes_per_string) {
  return bytes_per_string == kDefaultBytesPerString ? "" : absl::StrCat(":", bytes_per_string);
}

// Parses one integer field of a partitioner spec; whitespace is rejected so that a flag like
// "fixed: 4" is reported instead of silently accepted.
absl::StatusOr<int64_t> ParseField(absl::string_view spec, absl::string_view field,
                                   absl::string_view what) {
  int64_t value = 0;
  const bool has_space =
      std::any_of(field.begin(), field.end(), [](char c) { return absl::ascii_isspace(c); });
  if (field.empty() || has_space || !absl::SimpleAtoi(field, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("partitioner spec '", spec, "': ", what,
                                                   " must be an integer, got '", field, "'"));
  }
  return value;
}

}  // namespace

Partitioner::Partitioner()
    : fn_([](const Shape& shape, DType) { return std::vector<int64_t>(shape.rank(), 1); }),
      description_("none") {}

absl::StatusOr<std::vector<int64_t>> Partitioner::Partition(const Shape& shape, DType dtype) const {
  std::vector<int64_t> result = fn_(shape, dtype);
  const auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("partitioner '", description_, "' returned [", absl::StrJoin(result, ", "),
                     "] for shape ", shape.ToString(), " (", DTypeName(dtype), "): ", why));
  };
  if (static_cast<int>(result.size()) != shape.rank()) {
    return fail(absl::StrCat("expected one entry per axis (", shape.rank(), ")"));
  }
  if (!result.empty() && result[0] < 1) return fail("the axis-0 shard count must be >= 1");
  for (size_t i = 1; i < result.size(); ++i) {
    if (result[i] != 1) {
      return fail(absl::StrCat("entry ", i, " must be 1 (only axis 0 is sharded)"));
    }
  }
  return result;
}

absl::StatusOr<Partitioner> CustomPartitioner(PartitionerFn fn, std::string description) {
  if (!fn) return absl::InvalidArgumentError("custom partitioner: the function is empty");
  if (description.empty()) {
    return absl::InvalidArgumentError("custom partitioner: the description is empty");
  }
  return Partitioner(std::move(fn), std::move(description));
}

absl::StatusOr<Partitioner> FixedShardsPartitioner(int64_t num_shards) {
  TESSERA_RETURN_IF_ERROR(CheckPositive(num_shards, "FixedShardsPartitioner", "num_shards"));
  return CustomPartitioner(
      [num_shards](const Shape& shape, DType) {
        return AxisZeroShards(shape, std::max<int64_t>(1, std::min(num_shards, shape.rows())));
      },
      absl::StrCat("fixed:", num_shards));
}

absl::StatusOr<Partitioner> MinSizePartitioner(int64_t min_shard_bytes, int64_t max_shards,
                                               int64_t bytes_per_string) {
  TESSERA_RETURN_IF_ERROR(CheckPositive(min_shard_bytes, "MinSizePartitioner", "min_shard_bytes"));
  TESSERA_RETURN_IF_ERROR(CheckPositive(max_shards, "MinSizePartitioner", "max_shards"));
  TESSERA_RETURN_IF_ERROR(
      CheckPositive(bytes_per_string, "MinSizePartitioner", "bytes_per_string"));
  return CustomPartitioner(
      [=](const Shape& shape, DType dtype) {
        const int64_t rows = shape.rows();
        const absl::uint128 total = absl::uint128(static_cast<uint64_t>(rows)) *
                                    BytesPerRow(shape, DTypeSize(dtype, bytes_per_string));
        const absl::uint128 m = static_cast<uint64_t>(min_shard_bytes);
        const int64_t wanted = CapToInt64((total + m - 1) / m, std::min(rows, max_shards));
        return AxisZeroShards(shape, std::max<int64_t>(1, wanted));
      },
      absl::StrCat("min_size:", min_shard_bytes, ":", max_shards,
                   BytesPerStringSuffix(bytes_per_string)));
}

absl::StatusOr<Partitioner> MaxSizePartitioner(int64_t max_shard_bytes,
                                               std::optional<int64_t> max_shards,
                                               int64_t bytes_per_string) {
  TESSERA_RETURN_IF_ERROR(CheckPositive(max_shard_bytes, "MaxSizePartitioner", "max_shard_bytes"));
  if (max_shards)
    TESSERA_RETURN_IF_ERROR(CheckPositive(*max_shards, "MaxSizePartitioner", "max_shards"));
  TESSERA_RETURN_IF_ERROR(
      CheckPositive(bytes_per_string, "MaxSizePartitioner", "bytes_per_string"));
  return CustomPartitioner(
      [=](const Shape& shape, DType dtype) {
        const int64_t rows = shape.rows();
        const absl::uint128 row_bytes = BytesPerRow(shape, DTypeSize(dtype, bytes_per_string));
        // Zero-sized rows all fit in one shard (TF divides by zero here).
        int64_t shards = 1;
        if (row_bytes > 0 && rows > 0) {
          const int64_t rows_per_shard = std::max<int64_t>(
              1,
              CapToInt64(absl::uint128(static_cast<uint64_t>(max_shard_bytes)) / row_bytes, rows));
          shards = rows / rows_per_shard + (rows % rows_per_shard != 0 ? 1 : 0);
        }
        if (max_shards) shards = std::min(shards, *max_shards);
        return AxisZeroShards(shape, shards);
      },
      absl::StrCat("max_size:", max_shard_bytes, ":",
                   max_shards ? absl::StrCat(*max_shards) : std::string("none"),
                   BytesPerStringSuffix(bytes_per_string)));
}

absl::StatusOr<Partitioner> ParsePartitioner(absl::string_view spec) {
  const std::vector<absl::string_view> fields = absl::StrSplit(spec, ':');
  const absl::string_view kind = fields[0];
  const size_t args = fields.size() - 1;
  const auto wrong_arity = [&](absl::string_view expected) {
    return absl::InvalidArgumentError(absl::StrCat("partitioner spec '", spec, "': expected ",
                                                   expected, ", got ", args, " field(s)"));
  };
  absl::StatusOr<Partitioner> result;
  if (kind == "none") {
    if (args != 0) return wrong_arity("'none'");
    return Partitioner();
  } else if (kind == "fixed") {
    if (args != 1) return wrong_arity("'fixed:NUM_SHARDS'");
    TESSERA_ASSIGN_OR_RETURN(const int64_t n, ParseField(spec, fields[1], "NUM_SHARDS"));
    result = FixedShardsPartitioner(n);
  } else if (kind == "min_size") {
    if (args < 1 || args > 3) return wrong_arity("'min_size:BYTES[:MAX[:BYTES_PER_STRING]]'");
    TESSERA_ASSIGN_OR_RETURN(const int64_t bytes, ParseField(spec, fields[1], "BYTES"));
    int64_t max_shards = 1;
    int64_t per_string = kDefaultBytesPerString;
    if (args >= 2) {
      TESSERA_ASSIGN_OR_RETURN(max_shards, ParseField(spec, fields[2], "MAX"));
    }
    if (args >= 3) {
      TESSERA_ASSIGN_OR_RETURN(per_string, ParseField(spec, fields[3], "BYTES_PER_STRING"));
    }
    result = MinSizePartitioner(bytes, max_shards, per_string);
  } else if (kind == "max_size") {
    if (args < 1 || args > 3) {
      return wrong_arity("'max_size:BYTES[:MAX|none[:BYTES_PER_STRING]]'");
    }
    TESSERA_ASSIGN_OR_RETURN(const int64_t bytes, ParseField(spec, fields[1], "BYTES"));
    std::optional<int64_t> max_shards;
    int64_t per_string = kDefaultBytesPerString;
    if (args >= 2 && fields[2] != "none") {
      TESSERA_ASSIGN_OR_RETURN(max_shards, ParseField(spec, fields[2], "MAX"));
    }
    if (args >= 3) {
      TESSERA_ASSIGN_OR_RETURN(per_string, ParseField(spec, fields[3], "BYTES_PER_STRING"));
    }
    result = MaxSizePartitioner(bytes, max_shards, per_string);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("partitioner spec '", spec, "': unknown kind '", kind,
                     "' (expected none, fixed, min_size or max_size)"));
  }
  if (!result.ok()) return Annotate(result.status(), absl::StrCat("partitioner spec '", spec, "'"));
  return result;
}

absl::StatusOr<int64_t> NumShards(const Partitioner& partitioner, const Shape& shape, DType dtype) {
  if (shape.rank() == 0 || shape.rows() == 0) return 1;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<int64_t> shards, partitioner.Partition(shape, dtype));
  return std::min(shards[0], shape.rows());
}

}  // namespace tessera
