// Temporary directories and whole-file reads for tests.
//
//   TempDir dir;                                  // removed, with what it holds, at scope exit
//   WriteSomething(dir.Sub("out.json"));
//   CHECK(ReadFile(dir.Sub("out.json")) == "...");
//
// Thread-safety: a TempDir is used by one thread.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tessera::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/tessera_test_XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }
  // Sub(name), created as a directory.
  std::string MakeSub(const std::string& name) const {
    const std::string sub = Sub(name);
    REQUIRE(std::filesystem::create_directory(sub));
    return sub;
  }

 private:
  std::string path_;
};

// The whole file at `path` ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace tessera::testing
