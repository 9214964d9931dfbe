#include "http/internal/response_wire.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace http_internal {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 400 ? "OK" : "Error";
  }
}

// The status line and headers of `response`, with Content-Length and, when `close`,
// "Connection: close".
std::string ResponseHead(const HttpResponse& response, bool close) {
  std::string head = absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status),
                                  "\r\nContent-Type: ", response.content_type,
                                  "\r\nContent-Length: ", response.body.size(), "\r\n");
  for (const auto& [name, value] : response.headers)
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (close) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

}  // namespace

Wire ResponseWire(HttpResponse response, bool head_only, bool close) {
  Wire wire;
  wire.head = ResponseHead(response, close);
  if (!head_only) wire.body = std::move(response.body);
  return wire;
}

HttpResponse ErrorResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

}  // namespace http_internal
}  // namespace tessera
