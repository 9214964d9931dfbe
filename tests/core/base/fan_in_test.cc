#include "core/base/fan_in.h"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

namespace tessera {
namespace {

using Outcome = std::optional<absl::StatusOr<std::vector<std::string>>>;

TEST_CASE("a fan-in delivers every result in slot order, once, when the last one arrives") {
  Outcome outcome;
  int calls = 0;
  auto join = FanIn<std::string>::Start(3, [&](absl::StatusOr<std::vector<std::string>> all) {
    ++calls;
    outcome = std::move(all);
  });
  join->Slot(2)(std::string("c"));
  join->Slot(0)(std::string("a"));
  CHECK(calls == 0);
  CHECK(!join->finished());
  join->Slot(1)(std::string("b"));
  REQUIRE(calls == 1);
  REQUIRE(outcome->ok());
  CHECK(**outcome == std::vector<std::string>{"a", "b", "c"});
  CHECK(join->finished());
}

TEST_CASE("a fan-in finishes with the first error at once and drops what arrives later") {
  Outcome outcome;
  int calls = 0;
  auto join = FanIn<std::string>::Start(3, [&](absl::StatusOr<std::vector<std::string>> all) {
    ++calls;
    outcome = std::move(all);
  });
  join->Slot(0)(std::string("a"));
  join->Slot(2)(absl::UnavailableError("shard gone"));
  REQUIRE(calls == 1);
  CHECK(outcome->status() == absl::UnavailableError("shard gone"));
  join->Slot(1)(std::string("b"));
  join->Slot(1)(absl::InternalError("later"));
  CHECK(calls == 1);
  CHECK(outcome->status() == absl::UnavailableError("shard gone"));
}

TEST_CASE("a fan-in of nothing finishes at once with no results") {
  Outcome outcome;
  auto join = FanIn<std::string>::Start(0, [&](absl::StatusOr<std::vector<std::string>> all) {
    outcome = std::move(all);
  });
  REQUIRE(outcome.has_value());
  REQUIRE(outcome->ok());
  CHECK((*outcome)->empty());
  CHECK(join->finished());
}

TEST_CASE("a fan-in outlives its owner while a slot still holds it") {
  Outcome outcome;
  std::function<void(absl::StatusOr<std::string>)> slot;
  {
    auto join = FanIn<std::string>::Start(1, [&](absl::StatusOr<std::vector<std::string>> all) {
      outcome = std::move(all);
    });
    slot = join->Slot(0);
  }
  slot(std::string("late"));
  REQUIRE(outcome.has_value());
  CHECK(**outcome == std::vector<std::string>{"late"});
}

}  // namespace
}  // namespace tessera
