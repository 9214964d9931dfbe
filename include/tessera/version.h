// The version of this build of Tessera and how it was built: what `--version` prints on every
// binary, and what checkpoints and exports record as the version that wrote them.
//
// The numbers come from the top-level CMakeLists.txt's project(VERSION), the build type from
// CMake's configuration (core/CMakeLists.txt passes both to version.cc alone, so changing them
// recompiles one file).
//
// Example:
//   std::cout << tessera::VersionLine() << "\n";  // tessera 0.1.0 (Release build)
//   manifest.writer_version == tessera::Version()  // "0.1.0", in a file this build wrote
//
// Thread-safety: pure functions over constants.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

// "0.1.0": major.minor.patch.
absl::string_view Version();

// CMake's build type: "Release", "Debug", "RelWithDebInfo", ...
absl::string_view BuildType();

// What the build adds to its type, empty for the default build: "-march=native" for a
// TESSERA_NATIVE build (which runs only on CPUs like the build machine's), the sanitizers.
absl::string_view BuildOptions();

// "tessera 0.1.0 (Release build)"; with options, "tessera 0.1.0 (Release build, -march=native)".
std::string VersionLine();

// Whether `version` could be a version a build wrote into a file: 1 to 64 printable ASCII
// characters without spaces ("0.1.0", "0.2.0-rc1"). The file readers refuse anything else.
bool IsVersionString(absl::string_view version);

}  // namespace tessera
