// Status helpers: Abseil 20220623 has no status macros, so these are ours; and the callbacks a
// non-blocking operation calls once it is done (Done<T>: with its value or error; DoneStatus:
// with its status).
//
//   TESSERA_RETURN_IF_ERROR(expr);        returns expr's status from the caller when it is not ok.
//   TESSERA_ASSIGN_OR_RETURN(lhs, expr);  evaluates a StatusOr; returns its error, or assigns the
//                                         value.
// Both carry the project's prefix, as installed macros must (a program's own RETURN_IF_ERROR, or
// another library's, would otherwise collide with them).
//
// Example:
//   absl::StatusOr<Tensor> Load(...) {
//     TESSERA_RETURN_IF_ERROR(CheckSameShape(a, b, "assign"));
//     TESSERA_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector(shape, values));
//     return t;
//   }
#pragma once

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TESSERA_STATUS_CONCAT_INNER(a, b) a##b
#define TESSERA_STATUS_CONCAT(a, b) TESSERA_STATUS_CONCAT_INNER(a, b)

#define TESSERA_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status tessera_status_ = (expr);           \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (false)

#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL(TESSERA_STATUS_CONCAT(tessera_statusor_, __LINE__), lhs, expr)

#define TESSERA_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace tessera {

// Prefixes an error's message with context ("restoring emb/part_1: ..."); ok passes through.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

template <class T>
using Done = std::function<void(absl::StatusOr<T>)>;
using DoneStatus = std::function<void(absl::Status)>;

}  // namespace tessera
