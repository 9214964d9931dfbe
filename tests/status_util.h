// Status helpers for tests: unwrap a StatusOr or check a Status, failing the test case (with the
// error) otherwise.
#pragma once

#include <doctest/doctest.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::testing {

// The value, or the test case fails with `what` and the error.
template <class T>
T ValueOrDie(absl::StatusOr<T> value, const char* what = "") {
  REQUIRE_MESSAGE(value.ok(), what, ": ", value.status().ToString());
  return *std::move(value);
}

// Fails the test case unless `status` is OK.
inline void CheckOk(const absl::Status& status) { REQUIRE_MESSAGE(status.ok(), status.ToString()); }

}  // namespace tessera::testing
