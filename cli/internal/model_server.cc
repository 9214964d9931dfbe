#include "cli/internal/model_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
// Last: see Note [httplib after Eigen].
#include <httplib.h>

namespace tessera::cli {
namespace {

constexpr char kJson[] = "application/json";

// The error httplib itself answers with `status` (it gives no body).
std::string TransportError(int status) {
  switch (status) {
    case 400:
      return "malformed HTTP request";
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    default:
      return absl::StrCat("HTTP error ", status);
  }
}

}  // namespace

ModelServer::ModelServer(const ModelService& service, size_t max_body_bytes)
    : service_(service), server_(std::make_unique<httplib::Server>()) {
  // Every method goes to the service, which knows which resources take which method (405).
  const auto handle = [this](const httplib::Request& request, httplib::Response& response) {
    const HttpReply reply = service_.Handle(request.method, request.path, request.body);
    response.status = reply.status;
    if (!reply.allow.empty()) response.set_header("Allow", reply.allow);
    response.set_content(reply.body, kJson);
  };
  server_->Get(".*", handle);
  server_->Post(".*", handle);
  server_->Put(".*", handle);
  server_->Patch(".*", handle);
  server_->Delete(".*", handle);
  server_->Options(".*", handle);
  server_->set_payload_max_length(max_body_bytes);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a port already served
  // and silently take part of its traffic. SO_REUSEADDR alone still allows a restart while old
  // connections linger in TIME_WAIT, but makes a busy port an error.
  server_->set_socket_options([](int socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // httplib's own errors (413, a malformed request line) come without a body: give them one.
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request&, httplib::Response& response) {
        if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        response.set_content(ErrorBody(TransportError(response.status)), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          message = absl::StrCat("internal error: ", e.what());
        } catch (...) {
        }
        response.status = 500;
        response.set_content(ErrorBody(message), kJson);
      });
}

ModelServer::~ModelServer() { Stop(); }

absl::StatusOr<int> ModelServer::Bind(const std::string& host, int port) {
  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (server_->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port,
                     errno != 0 ? absl::StrCat(": ", std::strerror(errno)) : std::string()));
  }
  bound_ = true;
  return bound;
}

absl::Status ModelServer::Run() {
  if (!bound_) return absl::FailedPreconditionError("ModelServer::Run before Bind");
  running_ = true;
  // Note the order: Stop sets stop_requested_ before it reads running_, and Run sets running_
  // before it reads stop_requested_, so a Stop racing with the start of Run is never lost.
  const bool ok = stop_requested_ || server_->listen_after_bind();
  running_ = false;
  if (!ok && !stop_requested_) {
    return absl::UnavailableError("the HTTP server stopped accepting connections");
  }
  return absl::OkStatus();
}

void ModelServer::Stop() {
  stop_requested_ = true;
  // httplib's stop() does nothing until listen_after_bind has marked the server running, so a
  // Stop just after Run started is repeated until it takes.
  while (running_) {
    server_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  server_->stop();
}

}  // namespace tessera::cli
