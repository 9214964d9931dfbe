// ClosureValues: named, typed closure arguments and results, and RemoteValue's typed Fetch.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "core/scheduling/closure.h"
#include "tessera/closure.h"

namespace tessera {
namespace {

TEST_CASE("each value comes back as the type it was set with") {
  ClosureValues values;
  values.Set("batch", int64_t{7})
      .Set("loss", 0.25)
      .Set("worker", std::string("ps 1"))
      .Set("weights", Tensor(Shape{2, 3}, 1.5f));
  CHECK(values.size() == 4);
  CHECK(*values.Get<int64_t>("batch") == 7);
  CHECK(*values.Get<double>("loss") == 0.25);
  CHECK(*values.Get<std::string>("worker") == "ps 1");
  const Tensor weights = *values.Get<Tensor>("weights");
  CHECK(weights.shape() == Shape{2, 3});
  CHECK(weights.values()[5] == 1.5f);
  CHECK(*values.TypeOf("weights") == ClosureValueType::kTensor);
}

TEST_CASE("an int is an int64, a float a double and a C string a string") {
  ClosureValues values;
  values.Set("count", 3).Set("rate", 0.5f).Set("name", "train_step");
  CHECK(*values.Get<int64_t>("count") == 3);
  CHECK(*values.Get<double>("rate") == 0.5);
  CHECK(*values.Get<std::string>("name") == "train_step");
}

TEST_CASE("setting a name again replaces its value, whatever its type") {
  ClosureValues values;
  values.Set("x", int64_t{1});
  values.Set("x", 2.5);
  CHECK(values.size() == 1);
  CHECK(*values.Get<double>("x") == 2.5);
  CHECK(values.Erase("x"));
  CHECK_FALSE(values.Erase("x"));
  CHECK(values.empty());
}

TEST_CASE("a missing value is InvalidArgument naming it, the type asked for and what is there") {
  ClosureValues values;
  values.Set("loss", 0.5).Set("examples", int64_t{512});
  const absl::Status missing = values.Get<int64_t>("batch").status();
  CHECK(missing.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(missing.message(), "\"batch\" (int64) is missing"));
  CHECK(absl::StrContains(missing.message(), "examples (int64), loss (double)"));
  CHECK(absl::StrContains(ClosureValues().Get<double>("loss").status().message(), "has none"));
  CHECK(values.TypeOf("batch").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a value of another type is InvalidArgument naming the type it holds") {
  ClosureValues values;
  values.Set("batch", int64_t{7}).Set("t", Tensor(Shape{1}));
  struct Case {
    absl::Status status;
    const char* message;
  };
  const Case cases[] = {
      {values.Get<double>("batch").status(), "\"batch\" holds an int64, not a double"},
      {values.Get<std::string>("batch").status(), "\"batch\" holds an int64, not a string"},
      {values.Get<Tensor>("batch").status(), "\"batch\" holds an int64, not a tensor"},
      {values.Get<int64_t>("t").status(), "\"t\" holds a tensor, not an int64"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    CHECK(c.status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(c.status.message(), c.message));
  }
}

TEST_CASE("RemoteValue::Fetch<T> reads one named value of the result, or says why it cannot") {
  const RemoteValue failed = RemoteValue::Failed(absl::UnavailableError("worker gone"));
  CHECK(failed.Fetch<double>("loss").status() == absl::UnavailableError("worker gone"));
  CHECK(RemoteValue().Fetch<double>("loss").status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera
