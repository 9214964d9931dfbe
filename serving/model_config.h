// ModelConfig: what `tessera serve` serves from a model base path — a model's name, the directory
// holding its numbered versions (1/, 2/, ... each an export), and which of them to serve — and
// ParseModelConfig, which reads TensorFlow Serving's model config file (--model_config_file), the
// protobuf text format of its ModelServerConfig, in the subset that describes that:
//
//   model_config_list {
//     config {
//       name: "recsys"
//       base_path: "/models/recsys"
//       model_platform: "tensorflow"                  # optional; "tensorflow" or "tessera"
//       model_version_policy { latest { num_versions: 2 } }    # optional; or all {}, or
//     }                                                        # specific { versions: 3 ... }
//     config { name: 'ctr' base_path: '/models/ctr' }
//   }
//
// Text-format syntax: `field: value`, `field { ... }` (or `field: { ... }`, `< ... >`), values
// single- or double-quoted strings (C escapes) and numbers, repeated scalars as `[1, 2]` too,
// separators `,` or `;` optional, `#` comments.
//
// Errors are InvalidArgument naming the file's line and the field: malformed text, a field this
// subset does not have (or does not support: version_labels, logging_config, ...), a field given
// twice, a missing name or base_path, a name unusable in a URL, two models of one name, a
// platform other than those above, a policy without exactly one choice or with a bad number.
// Nesting and size are bounded, so no file makes the parser recurse or allocate without limit.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tessera/env.h"

namespace tessera::serving {

// Which versions of those on disk to serve: TF Serving's ServableVersionPolicy.
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t latest = 1;          // kLatest: the newest this many
  std::set<int64_t> specific;  // kSpecific: these (those on disk)
};

struct ModelConfig {
  std::string name;
  std::string base_path;
  VersionPolicy policy;  // TF Serving's default: the newest version
};

// InvalidArgument unless `name` is non-empty and holds no '/' or ':' (it is a URL segment).
absl::Status CheckModelName(const std::string& name);

// The models of a config file's text; `file` names it in errors.
absl::StatusOr<std::vector<ModelConfig>> ParseModelConfig(absl::string_view text,
                                                          absl::string_view file);

// Reads and parses `path` (at most 4 MiB): NotFound when it cannot be read, ParseModelConfig's
// errors.
absl::StatusOr<std::vector<ModelConfig>> ReadModelConfigFile(const std::string& path,
                                                             Env* env = Env::Default());

}  // namespace tessera::serving
