// An answer as it goes on the wire: the status line and headers an HttpResponse is encoded into,
// and the head and body a connection sends together (server_loop.h writes them with one sendmsg).
//
// Thread-safety: values and pure functions; called from the loop and the handler threads alike.
#pragma once

#include <cstddef>
#include <string>

#include "http/http_server.h"

namespace tessera {
namespace http_internal {

// An answer on its way out: the head and the body, sent together with one sendmsg.
struct Wire {
  std::string head;
  std::string body;
  size_t sent = 0;

  size_t size() const { return head.size() + body.size(); }
};

// `response` encoded: its status line and headers, with Content-Length and, when `close`,
// "Connection: close"; and its body unless `head_only` (the answer to a HEAD request).
Wire ResponseWire(HttpResponse response, bool head_only, bool close);

// An error the server answers itself, with the body its ErrorBody made.
HttpResponse ErrorResponse(int status, std::string body);

}  // namespace http_internal
}  // namespace tessera
