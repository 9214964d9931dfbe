#include "tessera/version.h"

#include "absl/strings/str_cat.h"

// core/CMakeLists.txt defines these for this file; the fallbacks keep a build by other means
// honest about not knowing.
#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif
#ifndef TESSERA_BUILD_TYPE
#define TESSERA_BUILD_TYPE "unknown"
#endif
#ifndef TESSERA_BUILD_OPTIONS
#define TESSERA_BUILD_OPTIONS ""
#endif

namespace tessera {

absl::string_view Version() { return TESSERA_VERSION; }

absl::string_view BuildType() {
  // A build without CMAKE_BUILD_TYPE (a multi-config generator's unset configuration) has none.
  absl::string_view type = TESSERA_BUILD_TYPE;
  return type.empty() ? "unspecified" : type;
}

absl::string_view BuildOptions() { return TESSERA_BUILD_OPTIONS; }

std::string VersionLine() {
  std::string line = absl::StrCat("tessera ", Version(), " (", BuildType(), " build");
  if (!BuildOptions().empty()) absl::StrAppend(&line, ", ", BuildOptions());
  line += ")";
  return line;
}

bool IsVersionString(absl::string_view version) {
  if (version.empty() || version.size() > 64) return false;
  for (const char c : version) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace tessera
