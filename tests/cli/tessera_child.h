// The built `tessera` binary as a child process, for the process-level cli tests: spawn it with
// its output in files, wait for it, signal it, read its memory use, find the port `serve` prints.
// A child process can signal nothing to the test, so every wait on one (its output, its exit, a
// server's answers) is a PollUntil (tests/poll_until.h).
//
//   Child server(dir, {"serve", "--model", model_dir, "--port", "0"}, "/dev/null");
//   const int port = WaitForPort(server);
//   ...
//   server.Signal(SIGTERM);
//   CHECK(server.Wait() == 0);
//
// Needs TESSERA_BINARY (the binary's path, set by tests/CMakeLists.txt).
// Thread-safety: a Child is used by one thread.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/cli/cli_test_util.h"
#include "tests/poll_until.h"

extern char** environ;

namespace tessera::testing {

using tessera::testing::ReadFile;

inline bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A running `tessera` child with stdin, stdout and stderr redirected to files of `dir`; killed at
// scope exit if still running. `launcher` (e.g. {"/usr/bin/prlimit", "--as=1000000000"}) runs
// the binary when given: it must exec it in place, so that pid() is the binary's.
class Child {
 public:
  Child(const TempDir& dir, const std::vector<std::string>& args, const std::string& stdin_path,
        const std::vector<std::string>& launcher = {})
      : out_(dir.Sub("stdout.txt")), err_(dir.Sub("stderr.txt")) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, stdin_path.c_str(), O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> argv_strings = launcher;
    argv_strings.push_back(TESSERA_BINARY);
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_strings) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(error == 0);
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The exit code, or -1 when it did not exit normally within `timeout`.
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    int code = -1;
    PollUntil(
        [&] {
          int status = 0;
          if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
          pid_ = -1;
          code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
          return true;
        },
        absl::FromChrono(timeout));
    return code;
  }
  // Still running (not exited, not killed).
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  void Signal(int signal) { kill(pid_, signal); }
  pid_t pid() const { return pid_; }
  std::string out() const { return ReadFile(out_); }
  std::string err() const { return ReadFile(err_); }

  // A field of /proc/PID/status in MiB ("VmHWM": the peak resident set; "VmRSS", "VmSize"), or
  // -1 when it cannot be read.
  int64_t MemoryMiB(const std::string& field) const {
    std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(field + ":", 0) != 0) continue;
      int64_t kib = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      return absl::SimpleAtoi(digits, &kib) ? kib / 1024 : -1;
    }
    return -1;
  }

 private:
  std::string out_;
  std::string err_;
  pid_t pid_ = -1;
};

struct Finished {
  int code;
  std::string out;
  std::string err;
};

inline Finished RunTessera(const TempDir& dir, const std::vector<std::string>& args,
                           const std::string& stdin_path = "/dev/null") {
  Child child(dir, args, stdin_path);
  const int code = child.Wait();
  return {code, child.out(), child.err()};
}

// The port in serve's "... at http://127.0.0.1:PORT/v1/models/..." line, once it is printed; -1
// when it is not within 30 s.
inline int WaitForPort(const Child& child) {
  const std::string marker = "http://127.0.0.1:";
  int port = -1;
  PollUntil(
      [&] {
        const std::string out = child.out();
        const size_t at = out.find(marker);
        const size_t end = at == std::string::npos ? at : out.find('/', at + marker.size());
        int printed = 0;
        if (end == std::string::npos ||
            !absl::SimpleAtoi(out.substr(at + marker.size(), end - at - marker.size()), &printed)) {
          return false;
        }
        port = printed;
        return true;
      },
      absl::Seconds(30));
  return port;
}

}  // namespace tessera::testing
