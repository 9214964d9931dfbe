// ScratchDir: the directory a bench writes its files into, removed when the bench ends however it
// ends (an error return included) unless the user named it with a flag, which keeps it for a look
// afterwards. Benches write gigabytes there: a failed run that left them behind filled a
// machine's disk.
//
//   const ScratchDir scratch(absl::GetFlag(FLAGS_dir), "tessera_ckpt_io");
//   WriteFiles(scratch.path());
//
// Thread-safety: none; one per bench run.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tessera::bench {

class ScratchDir {
 public:
  // `named`: the user's directory (kept); empty: a fresh /tmp/<prefix>_<pid> (removed).
  ScratchDir(const std::string& named, const std::string& prefix)
      : path_(named.empty() ? (std::filesystem::temp_directory_path() /
                               (prefix + "_" + std::to_string(::getpid())))
                                  .string()
                            : named),
        owned_(named.empty()) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (owned_) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_;
};

}  // namespace tessera::bench
