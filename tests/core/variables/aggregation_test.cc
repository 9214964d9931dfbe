#include "core/variables/aggregation.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

using Sync = VariableSynchronization;
using Agg = VariableAggregation;

Tensor MustTensor(Shape shape, std::vector<float> values) {
  absl::StatusOr<Tensor> t = Tensor::FromVector(std::move(shape), std::move(values));
  REQUIRE_MESSAGE(t.ok(), t.status().ToString());
  return *std::move(t);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.values().begin(), t.values().end());
}

Tensor MustAggregate(Agg aggregation, const std::vector<Tensor>& values) {
  absl::StatusOr<Tensor> got = AggregateReplicaValues(aggregation, values);
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  return *std::move(got);
}

struct ValidateCase {
  const char* what;
  Sync sync;
  Agg aggregation;
  DType dtype;
  bool ok;
  const char* message_part;  // for errors: a part of the message
};

TEST_CASE("ValidateAggregation accepts valid combinations and rejects invalid ones") {
  const ValidateCase cases[] = {
      {"auto, none, float32", Sync::kAuto, Agg::kNone, DType::kFloat32, true, ""},
      {"auto, sum, int64", Sync::kAuto, Agg::kSum, DType::kInt64, true, ""},
      {"on_write, none, int64", Sync::kOnWrite, Agg::kNone, DType::kInt64, true, ""},
      {"on_write, mean, float32", Sync::kOnWrite, Agg::kMean, DType::kFloat32, true, ""},
      {"on_write, only first, string", Sync::kOnWrite, Agg::kOnlyFirstReplica, DType::kString, true,
       ""},
      {"on_read, sum, int64", Sync::kOnRead, Agg::kSum, DType::kInt64, true, ""},
      {"on_read, mean, float32", Sync::kOnRead, Agg::kMean, DType::kFloat32, true, ""},
      {"on_read, only first, int64", Sync::kOnRead, Agg::kOnlyFirstReplica, DType::kInt64, true,
       ""},
      {"mean on int64", Sync::kOnWrite, Agg::kMean, DType::kInt64, false, "int64"},
      {"mean on int64, auto", Sync::kAuto, Agg::kMean, DType::kInt64, false, "int64"},
      {"mean on string", Sync::kOnWrite, Agg::kMean, DType::kString, false, "string"},
      {"mean on int64, on_read", Sync::kOnRead, Agg::kMean, DType::kInt64, false, "MEAN"},
      {"on_read with none", Sync::kOnRead, Agg::kNone, DType::kFloat32, false, "ON_READ"},
      {"on_read with none, int64", Sync::kOnRead, Agg::kNone, DType::kInt64, false, "NONE"},
      {"synchronization 3", static_cast<Sync>(3), Agg::kSum, DType::kFloat32, false,
       "synchronization"},
      {"synchronization -1", static_cast<Sync>(-1), Agg::kSum, DType::kFloat32, false,
       "synchronization"},
      {"aggregation 4", Sync::kOnWrite, static_cast<Agg>(4), DType::kFloat32, false, "aggregation"},
      {"aggregation -1", Sync::kOnWrite, static_cast<Agg>(-1), DType::kFloat32, false,
       "aggregation"},
      {"aggregation 4, on_read", Sync::kOnRead, static_cast<Agg>(4), DType::kFloat32, false,
       "aggregation"},
  };
  for (const ValidateCase& c : cases) {
    INFO(c.what);
    const absl::Status status = ValidateAggregation(c.sync, c.aggregation, c.dtype);
    if (c.ok) {
      CHECK_MESSAGE(status.ok(), status.ToString());
    } else {
      CHECK(status.code() == absl::StatusCode::kInvalidArgument);
      CHECK_MESSAGE(absl::StrContains(status.message(), c.message_part), status.ToString());
    }
  }
}

TEST_CASE("ValidateAggregation rejects a dtype outside the enum") {
  // The header's contract: InvalidArgument for "a value outside the enums" of the
  // (synchronization, aggregation, dtype) triple it checks.
  for (DType bad : {static_cast<DType>(0), static_cast<DType>(99)}) {
    CAPTURE(static_cast<int>(bad));
    // MEAN fails anyway (the dtype is not floating).
    CHECK(ValidateAggregation(Sync::kOnWrite, Agg::kMean, bad).code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(ValidateAggregation(Sync::kOnWrite, Agg::kSum, bad).code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("synchronization and aggregation names are the lower-case TF names") {
  CHECK(SynchronizationName(Sync::kAuto) == "auto");
  CHECK(SynchronizationName(Sync::kOnWrite) == "on_write");
  CHECK(SynchronizationName(Sync::kOnRead) == "on_read");
  CHECK(AggregationName(Agg::kNone) == "none");
  CHECK(AggregationName(Agg::kSum) == "sum");
  CHECK(AggregationName(Agg::kMean) == "mean");
  CHECK(AggregationName(Agg::kOnlyFirstReplica) == "only_first_replica");
  // The wire values never change.
  CHECK(static_cast<int>(Sync::kOnRead) == 2);
  CHECK(static_cast<int>(Agg::kOnlyFirstReplica) == 3);
}

TEST_CASE("replica updates aggregate by sum, mean or the first replica") {
  const std::vector<Tensor> updates = {
      MustTensor(Shape{2, 2}, {1, 2, 3, 4}),
      MustTensor(Shape{2, 2}, {10, 20, 30, 40}),
      MustTensor(Shape{2, 2}, {100, 200, 300, 400}),
  };
  struct Case {
    const char* what;
    Agg aggregation;
    std::vector<float> expected;
  };
  const Case cases[] = {
      {"sum", Agg::kSum, {111, 222, 333, 444}},
      {"mean", Agg::kMean, {37, 74, 111, 148}},
      {"only first replica", Agg::kOnlyFirstReplica, {1, 2, 3, 4}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Tensor got = MustAggregate(c.aggregation, updates);
    CHECK(got.shape() == Shape{2, 2});
    CHECK(Values(got) == c.expected);
  }
  // The inputs are left as they were.
  CHECK(Values(updates[0]) == std::vector<float>{1, 2, 3, 4});
  CHECK(Values(updates[1]) == std::vector<float>{10, 20, 30, 40});
}

TEST_CASE("aggregating by mean handles fractions and a single replica") {
  const std::vector<Tensor> two = {MustTensor(Shape{3}, {1, 2, -5}),
                                   MustTensor(Shape{3}, {2, 2, 4})};
  CHECK(Values(MustAggregate(Agg::kMean, two)) == std::vector<float>{1.5f, 2, -0.5f});
  CHECK(Values(MustAggregate(Agg::kSum, two)) == std::vector<float>{3, 4, -1});

  const std::vector<Tensor> one = {MustTensor(Shape{1, 3}, {0.25f, -7, 9})};
  for (Agg a : {Agg::kSum, Agg::kMean, Agg::kOnlyFirstReplica}) {
    INFO(AggregationName(a));
    Tensor got = MustAggregate(a, one);
    CHECK(got.shape() == Shape{1, 3});
    CHECK(Values(got) == std::vector<float>{0.25f, -7, 9});
  }
}

TEST_CASE("scalar replica values aggregate to a scalar") {
  const std::vector<Tensor> scalars = {Tensor(Shape{}, 1.5f), Tensor(Shape{}, 2.5f),
                                       Tensor(Shape{}, 5.0f)};
  struct Case {
    Agg aggregation;
    float expected;
  };
  for (const Case& c :
       {Case{Agg::kSum, 9.0f}, Case{Agg::kMean, 3.0f}, Case{Agg::kOnlyFirstReplica, 1.5f}}) {
    INFO(AggregationName(c.aggregation));
    Tensor got = MustAggregate(c.aggregation, scalars);
    CHECK(got.shape() == Shape{});
    CHECK(got.shape().rank() == 0);
    CHECK(Values(got) == std::vector<float>{c.expected});
  }
}

TEST_CASE("aggregation NONE cannot combine replica updates") {
  const std::vector<Tensor> updates = {Tensor(Shape{2}, 1.0f), Tensor(Shape{2}, 2.0f)};
  for (const std::vector<Tensor>& values : {updates, std::vector<Tensor>{updates[0]}}) {
    CAPTURE(values.size());
    absl::StatusOr<Tensor> got = AggregateReplicaValues(Agg::kNone, values);
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(got.status().message(), "needs an aggregation"));
  }
}

TEST_CASE("aggregating replica values of different shapes is an error naming both shapes") {
  struct Case {
    const char* what;
    std::vector<Tensor> values;
    const char* got_shape;
    const char* want_shape;
  };
  const Case cases[] = {
      {"second differs", {Tensor(Shape{2, 2}), Tensor(Shape{2, 3})}, "[2, 3]", "[2, 2]"},
      {"same size, other shape", {Tensor(Shape{2, 3}), Tensor(Shape{3, 2})}, "[3, 2]", "[2, 3]"},
      {"third differs", {Tensor(Shape{4}), Tensor(Shape{4}), Tensor(Shape{5})}, "[5]", "[4]"},
      {"scalar and one element", {Tensor(Shape{}), Tensor(Shape{1})}, "[1]", "[]"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    for (Agg a : {Agg::kSum, Agg::kMean, Agg::kOnlyFirstReplica}) {
      INFO(AggregationName(a));
      absl::StatusOr<Tensor> got = AggregateReplicaValues(a, c.values);
      CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
      const std::string message(got.status().message());
      CHECK_MESSAGE(absl::StrContains(message, c.got_shape), message);
      CHECK_MESSAGE(absl::StrContains(message, c.want_shape), message);
    }
  }
}

TEST_CASE("aggregating no replica values is an error") {
  for (Agg a : {Agg::kNone, Agg::kSum, Agg::kMean, Agg::kOnlyFirstReplica}) {
    INFO(AggregationName(a));
    absl::StatusOr<Tensor> got = AggregateReplicaValues(a, {});
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("an aggregation outside the enum is an error when combining") {
  const std::vector<Tensor> updates = {Tensor(Shape{2}, 1.0f), Tensor(Shape{2}, 2.0f)};
  absl::StatusOr<Tensor> got = AggregateReplicaValues(static_cast<Agg>(7), updates);
  CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(got.status().message(), "7"));
}

}  // namespace
}  // namespace tessera
