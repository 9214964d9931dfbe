// serve_http: what `tessera serve` costs a client and itself over HTTP on loopback. It exports the
// reference recsys model (U=100k, I=10k, D=32, hidden 64), starts the `tessera` binary given by
// --tessera on it, and measures, as one client:
//
//   keep-alive   --requests sequential 1-instance predicts on one connection (a new connection
//                only when the server closes one), req/s
//   close        the same, each with "Connection: close" on a connection of its own, req/s
//   max-size     the largest request the server takes: 10000 instances padded with spaces to
//                --big_body_mb; its status and what it adds to a fresh server's peak RSS (VmHWM)
//   big body     --big_body_mb of instances (1.7 million at 50): the same
//
// req/s are the median of --rounds rounds. Point --tessera at another build to compare servers:
//
//   serve_http                                   # the tessera binary of this build
//   serve_http --tessera=/tmp/old/tessera --rounds=1
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "core/exported_model.h"
#include "core/initializer.h"
#include "core/status.h"
#include "schema/model_io.h"
#include "workloads/reference_models.h"

ABSL_FLAG(std::string, tessera, TESSERA_BINARY, "the tessera binary to serve with");
ABSL_FLAG(int, requests, 2000, "sequential requests per round, keep-alive and close each");
ABSL_FLAG(int, rounds, 3, "rounds (req/s is their median)");
ABSL_FLAG(int, big_body_mb, 50, "the size of the max-size and big-body requests, in MB");

extern char** environ;

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The reference recsys model with its initial values, exported to `dir`.
absl::Status ExportRecsys(const std::string& dir) {
  ExportedModel model;
  ASSIGN_OR_RETURN(model.spec, RecsysModelSpec(RecsysModelOptions{}));
  for (const ParamSpec& p : model.spec.params) {
    ASSIGN_OR_RETURN(Tensor value, MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows()));
    model.variables.emplace(p.name, std::move(value));
  }
  ASSIGN_OR_RETURN(Signature signature, ServingSignature(model.spec));
  model.signatures = {signature};
  return WriteExportedModel(dir, model);
}

// `tessera serve` as a child process, killed at scope exit.
class ServeProcess {
 public:
  absl::Status Start(const std::string& binary, const std::string& model_dir,
                     const std::string& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    std::vector<std::string> args = {binary,   "serve", "--model", model_dir,
                                     "--port", "0",     "--name",  "recsys"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
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

std::string Post(const std::string& body, bool close) {
  return absl::StrCat("POST /v1/models/recsys:predict HTTP/1.1\r\nHost: bench\r\n",
                      close ? "Connection: close\r\n" : "", "Content-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// {"instances": [...]}: `n` instances, then spaces up to `size` bytes in all; or, with n < 0, as
// many instances as make `size` bytes.
std::string Instances(int64_t n, size_t size = 0) {
  std::string body = "{\"instances\": [";
  for (int64_t i = 0; n < 0 ? body.size() + 40 < size : i < n; ++i) {
    absl::StrAppend(&body, i == 0 ? "" : ",", "{\"user\": ", (i * 7919) % 100000,
                    ", \"item\": ", (i * 104729) % 10000, "}");
  }
  body += "]";
  if (body.size() + 1 < size) body.append(size - body.size() - 1, ' ');
  body += "}";
  return body;
}

// Requests per second of `requests` sequential predicts; `reconnects` counts the connections the
// server closed under a keep-alive client.
absl::StatusOr<double> RequestsPerSecond(int port, int requests, bool close, int& reconnects) {
  const std::string request = Post(Instances(1), close);
  auto connection = std::make_unique<Connection>(port);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < requests; ++i) {
    if (close && i > 0) connection = std::make_unique<Connection>(port);
    bool closing = false;
    const int status = connection->Exchange(request, closing);
    if (status != 200) return absl::InternalError(absl::StrCat("a predict got HTTP ", status));
    if (closing && !close) {
      ++reconnects;
      connection = std::make_unique<Connection>(port);
    }
  }
  return requests / std::chrono::duration<double>(Clock::now() - start).count();
}

// The status of one request to a fresh server and what it added to the server's peak RSS.
absl::Status MeasureBig(const std::string& dir, const char* name, const std::string& body) {
  ServeProcess server;
  RETURN_IF_ERROR(server.Start(absl::GetFlag(FLAGS_tessera), dir, dir + "/serve_big.log"));
  const long before = server.PeakMiB();
  Connection connection(server.port());
  bool closing = false;
  const Clock::time_point start = Clock::now();
  const int status = connection.Exchange(Post(body, true), closing);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const long after = server.PeakMiB();
  std::printf("%-10s %6.1f MB body: HTTP %d in %.2f s; server peak RSS %ld -> %ld MiB (+%ld)\n",
              name, body.size() / 1e6, status, seconds, before, after, after - before);
  return absl::OkStatus();
}

absl::Status Run(int argc, char** argv) {
  std::printf("%s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  char pattern[] = "/tmp/serve_http_XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string dir = pattern;
  RETURN_IF_ERROR(ExportRecsys(dir));
  ServeProcess server;
  RETURN_IF_ERROR(server.Start(absl::GetFlag(FLAGS_tessera), dir, dir + "/serve.log"));
  std::printf("server: %s, idle peak RSS %ld MiB\n", absl::GetFlag(FLAGS_tessera).c_str(),
              server.PeakMiB());

  const int requests = absl::GetFlag(FLAGS_requests);
  std::vector<double> keep_alive, close;
  int reconnects = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    int closed = 0;
    ASSIGN_OR_RETURN(double rate, RequestsPerSecond(server.port(), requests, false, closed));
    keep_alive.push_back(rate);
    reconnects += closed;
    ASSIGN_OR_RETURN(rate, RequestsPerSecond(server.port(), requests, true, closed));
    close.push_back(rate);
  }
  std::printf(
      "keep-alive %6d requests: %8.0f req/s (median of %zu; the server closed %d "
      "connections)\n",
      requests, Median(keep_alive), keep_alive.size(), reconnects);
  std::printf("close      %6d requests: %8.0f req/s (median of %zu)\n", requests, Median(close),
              close.size());

  const size_t big = static_cast<size_t>(absl::GetFlag(FLAGS_big_body_mb)) * 1'000'000;
  RETURN_IF_ERROR(MeasureBig(dir, "max-size", Instances(10'000, big)));
  RETURN_IF_ERROR(MeasureBig(dir, "big body", Instances(-1, big)));
  std::string cleanup = "rm -rf " + dir;
  return std::system(cleanup.c_str()) == 0 ? absl::OkStatus()
                                           : absl::InternalError("cannot remove " + dir);
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  return tessera::bench::Main("serve_http", argc, argv, tessera::bench::Run);
}
