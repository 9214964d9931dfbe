// ModelServer: a ModelService (model_service.h) on an HTTP socket, with cpp-httplib.
//
//   ModelServer server(service);
//   ASSIGN_OR_RETURN(int port, server.Bind("127.0.0.1", 0));  // 0: any free port
//   std::thread thread([&] { server.Run(); });                 // serves until Stop
//   ...
//   server.Stop();
//   thread.join();
//
// Requests run on httplib's thread pool; bodies over `max_body_bytes` get 413, and every error
// reply, httplib's own included, is JSON {"error": "..."}.
//
// Thread-safety: Bind, then Run on one thread; Stop may be called from any thread at any time
// (before Run too: Run then returns at once). Not async-signal-safe: call Stop from a thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/internal/model_service.h"

// Note [httplib after Eigen]: httplib.h pulls in <resolv.h>, whose `#define _res` breaks Eigen
// headers included after it, so httplib stays out of this header and every file includes it
// after its Tessera headers.
namespace httplib {
class Server;
}  // namespace httplib

namespace tessera::cli {

class ModelServer {
 public:
  static constexpr size_t kDefaultMaxBodyBytes = size_t{64} << 20;

  // `service` must outlive the server.
  explicit ModelServer(const ModelService& service, size_t max_body_bytes = kDefaultMaxBodyBytes);
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;
  ~ModelServer();

  // Binds and listens on host:port (port 0: a free port) and returns the port. Unavailable when
  // the address cannot be bound (in use, not local).
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Accepts and answers requests until Stop. FailedPrecondition without a Bind.
  absl::Status Run();
  // Makes Run return (waiting until it has) and closes the socket.
  void Stop();

 private:
  const ModelService& service_;
  const std::unique_ptr<httplib::Server> server_;
  bool bound_ = false;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> running_{false};
};

}  // namespace tessera::cli
