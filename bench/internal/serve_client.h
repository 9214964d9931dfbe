// What the serving benchmarks (serve_http, serve_load) share: the reference recsys model exported
// to a directory, `tessera serve` as a child process, and a bare HTTP/1.1 client connection.
//
//   TESSERA_RETURN_IF_ERROR(ExportRecsys(dir));
//   ServeProcess server;
//   TESSERA_RETURN_IF_ERROR(server.Start(binary, {"--model", dir}, dir + "/serve.log"));
//   Connection connection(server.port());
//   bool closing = false;
//   int status = connection.Exchange(Post(Instances(1), false), closing);   // 200
//
// Thread-safety: a ServeProcess is used by one thread; a Connection by one thread at a time.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "tessera/model.h"
#include "tessera/status.h"
#include "tessera/workloads/reference_models.h"

extern char** environ;

namespace tessera::bench {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The reference recsys model (U=100k, I=10k, D=32, hidden 64) with its initial values, exported
// to `dir`.
inline absl::Status ExportRecsys(const std::string& dir) {
  ExportedModel model;
  TESSERA_ASSIGN_OR_RETURN(model.spec, RecsysModelSpec(RecsysModelOptions{}));
  for (const ParamSpec& p : model.spec.params) {
    TESSERA_ASSIGN_OR_RETURN(Tensor value,
                             MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows()));
    model.variables.emplace(p.name, std::move(value));
  }
  TESSERA_ASSIGN_OR_RETURN(Signature signature, ServingSignature(model.spec));
  model.signatures = {signature};
  return WriteExportedModel(dir, model);
}

// `tessera serve` as a child process, stopped with SIGTERM at scope exit.
class ServeProcess {
 public:
  // Runs `binary serve --port 0 --name recsys ARGS...` with stdout to `log` and stderr to
  // `err_log`, and waits for the URL it prints.
  absl::Status Start(const std::string& binary, const std::vector<std::string>& args,
                     const std::string& log, const std::string& err_log = "/dev/null") {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<std::string> all = {binary, "serve", "--port", "0", "--name", "recsys"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : all) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) return absl::UnavailableError(absl::StrCat("cannot run ", binary));
    const std::string marker = "http://127.0.0.1:";
    for (int i = 0; i < 3000; ++i) {
      const std::string out = ReadFile(log);
      const size_t at = out.find(marker);
      const size_t end = at == std::string::npos ? at : out.find('/', at + marker.size());
      if (end != std::string::npos &&
          absl::SimpleAtoi(out.substr(at + marker.size(), end - at - marker.size()), &port_)) {
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return absl::UnavailableError(absl::StrCat(binary, " serve did not start: ", ReadFile(log)));
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

  int port() const { return port_; }
  // The server's peak resident set (VmHWM) in MiB.
  long PeakMiB() const {
    std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6) / 1024;
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// One HTTP/1.1 connection on loopback (TCP_NODELAY, as a client should).
class Connection {
 public:
  explicit Connection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd_);
      fd_ = -1;
    }
    const int one = 1;
    if (fd_ >= 0) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  bool ok() const { return fd_ >= 0; }

  // Sends `request` and reads one response: its status (0 when the connection failed), and
  // whether the server will close the connection.
  int Exchange(const std::string& request, bool& closing) {
    for (size_t at = 0; at < request.size();) {
      const ssize_t n = send(fd_, request.data() + at, request.size() - at, MSG_NOSIGNAL);
      if (n <= 0) break;  // a server refusing a body may close before it is all sent
      at += static_cast<size_t>(n);
    }
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return 0;
    }
    const std::string head = buffer_.substr(0, head_end);
    int status = 0;
    absl::SimpleAtoi(head.substr(9, 3), &status);
    size_t length = 0;
    const size_t field = head.find("Content-Length: ");
    if (field != std::string::npos) {
      absl::SimpleAtoi(head.substr(field + 16, head.find("\r\n", field) - field - 16), &length);
    }
    closing = head.find("Connection: close") != std::string::npos;
    while (buffer_.size() < head_end + 4 + length) {
      if (!Fill()) return 0;
    }
    buffer_.erase(0, head_end + 4 + length);
    return status;
  }

 private:
  bool Fill() {
    char chunk[1 << 16];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
};

// A predict request for model "recsys" carrying `body`.
inline std::string Post(const std::string& body, bool close) {
  return absl::StrCat("POST /v1/models/recsys:predict HTTP/1.1\r\nHost: bench\r\n",
                      close ? "Connection: close\r\n" : "", "Content-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// {"instances": [...]}: `n` instances (users and items spread over the tables, starting at
// `first`), then spaces up to `size` bytes in all; or, with n < 0, as many instances as make
// `size` bytes.
inline std::string Instances(int64_t n, size_t size = 0, int64_t first = 0) {
  std::string body = "{\"instances\": [";
  for (int64_t i = 0; n < 0 ? body.size() + 40 < size : i < n; ++i) {
    const int64_t k = first + i;
    absl::StrAppend(&body, i == 0 ? "" : ",", "{\"user\": ", (k * 7919) % 100000,
                    ", \"item\": ", (k * 104729) % 10000, "}");
  }
  body += "]";
  if (body.size() + 1 < size) body.append(size - body.size() - 1, ' ');
  body += "}";
  return body;
}

}  // namespace tessera::bench
