#include "http/http_request_parser.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

// A chunk-size line ("1a2b;name=value") is short; anything longer is not one.
constexpr size_t kMaxChunkLineBytes = 1024;

// RFC 9110's tchar: the characters of a method or a header name.
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded; a '%' not followed by two hex digits stays as it is.
std::string DecodePath(absl::string_view path) {
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && HexValue(path[i + 1]) >= 0 &&
        HexValue(path[i + 2]) >= 0) {
      decoded.push_back(static_cast<char>(HexValue(path[i + 1]) * 16 + HexValue(path[i + 2])));
      i += 2;
    } else {
      decoded.push_back(path[i]);
    }
  }
  return decoded;
}

// The path of a request target: origin form ("/a/b?q"), absolute form ("http://host/a/b?q") or
// "*". False for anything else.
bool TargetPath(absl::string_view target, absl::string_view& path) {
  if (target == "*") {
    path = target;
    return true;
  }
  if (!absl::StartsWith(target, "/")) {
    const size_t scheme = target.find("://");
    if (scheme == absl::string_view::npos) return false;
    const absl::string_view after = target.substr(scheme + 3);
    const size_t slash = after.find('/');
    target = slash == absl::string_view::npos ? absl::string_view("/") : after.substr(slash);
  }
  path = target.substr(0, target.find_first_of("?#"));
  return true;
}

// A trailing '\r' removed (lines may end in CRLF or LF).
absl::string_view WithoutCr(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

size_t HttpRequestParser::Feed(absl::string_view data) {
  const size_t size = data.size();
  while (!data.empty() && phase_ != Phase::kComplete && phase_ != Phase::kFailed) {
    switch (phase_) {
      case Phase::kHead:
        ReadHead(data);
        break;
      case Phase::kBody:
        ReadBody(data);
        break;
      case Phase::kChunkSize:
        ReadChunkLine(data);
        break;
      case Phase::kChunkData:
        ReadChunkData(data);
        break;
      case Phase::kChunkDataEnd:
        ReadChunkDataEnd(data);
        break;
      case Phase::kTrailer:
        ReadTrailer(data);
        break;
      case Phase::kComplete:
      case Phase::kFailed:
        break;
    }
  }
  return size - data.size();
}

HttpRequest HttpRequestParser::Take() {
  HttpRequest request = std::move(request_);
  *this = HttpRequestParser(limits_);
  return request;
}

void HttpRequestParser::Fail(int status, std::string error) {
  phase_ = Phase::kFailed;
  error_status_ = status;
  error_ = std::move(error);
}

void HttpRequestParser::ReadHead(absl::string_view& data) {
  const size_t newline = data.find('\n');
  const size_t take = newline == absl::string_view::npos ? data.size() : newline + 1;
  const absl::string_view piece = data.substr(0, take);
  data.remove_prefix(take);
  head_bytes_ += take;
  if (!started_ && piece.find_first_not_of("\r\n") != absl::string_view::npos) started_ = true;
  if (head_bytes_ > limits_.max_head_bytes) {
    if (!request_line_done_ && started_) {
      Fail(414, absl::StrCat("request line longer than ", limits_.max_head_bytes, " bytes"));
    } else {
      Fail(431, absl::StrCat("request head longer than ", limits_.max_head_bytes, " bytes"));
    }
    return;
  }
  if (newline == absl::string_view::npos) {
    line_.append(piece.data(), piece.size());
    return;
  }
  line_.append(piece.data(), piece.size() - 1);
  const std::string line = std::move(line_);
  line_.clear();
  HeadLine(WithoutCr(line));
}

void HttpRequestParser::HeadLine(absl::string_view line) {
  if (!request_line_done_) {
    if (!line.empty()) RequestLine(line);  // empty lines before a request are skipped
  } else if (line.empty()) {
    HeadComplete();
  } else {
    HeaderLine(line);
  }
}

void HttpRequestParser::RequestLine(absl::string_view line) {
  request_line_done_ = true;
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty()) {
    Fail(400, "malformed request line (want METHOD TARGET HTTP/1.1)");
    return;
  }
  for (char c : parts[1]) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      Fail(400, "malformed request target");
      return;
    }
  }
  const absl::string_view version = parts[2];
  if (version == "HTTP/1.1") {
    request_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request_.minor_version = 0;
  } else if (absl::StartsWith(version, "HTTP/")) {
    Fail(505, absl::StrCat("HTTP version '", version.substr(5, 16), "' is not supported"));
    return;
  } else {
    Fail(400, "malformed request line (want METHOD TARGET HTTP/1.1)");
    return;
  }
  absl::string_view path;
  if (!TargetPath(parts[1], path)) {
    Fail(400, "malformed request target");
    return;
  }
  request_.method = std::string(parts[0]);
  request_.target = std::string(parts[1]);
  request_.path = DecodePath(path);
}

void HttpRequestParser::HeaderLine(absl::string_view line) {
  if (++headers_ > kMaxHeaders) {
    Fail(431, absl::StrCat("more than ", kMaxHeaders, " header fields"));
    return;
  }
  if (line.front() == ' ' || line.front() == '\t') {
    Fail(400, "malformed header (obsolete line folding)");
    return;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
    Fail(400, "malformed header line");
    return;
  }
  const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "content-length") {
    uint64_t length = 0;
    if (value.empty() || value.size() > 19 ||
        value.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(value, &length) || (has_content_length_ && length != content_length_)) {
      Fail(400, "malformed Content-Length");
      return;
    }
    has_content_length_ = true;
    content_length_ = length;
  } else if (name == "transfer-encoding") {
    if (chunked_ || !absl::EqualsIgnoreCase(value, "chunked")) {
      Fail(501, absl::StrCat("transfer coding '", value.substr(0, 64),
                             "' is not supported (only chunked)"));
      return;
    }
    chunked_ = true;
  } else if (name == "connection") {
    for (absl::string_view option : absl::StrSplit(value, ',')) {
      option = absl::StripAsciiWhitespace(option);
      if (absl::EqualsIgnoreCase(option, "close")) connection_close_ = true;
      if (absl::EqualsIgnoreCase(option, "keep-alive")) connection_keep_alive_ = true;
    }
  } else if (name == "expect") {
    if (absl::EqualsIgnoreCase(value, "100-continue")) expects_continue_ = true;
  }
}

void HttpRequestParser::HeadComplete() {
  if (chunked_ && has_content_length_) {
    // Two framings of one body are how requests are smuggled past proxies.
    Fail(400, "a request with both Content-Length and Transfer-Encoding");
    return;
  }
  request_.keep_alive = request_.minor_version >= 1 ? !connection_close_
                                                    : connection_keep_alive_ && !connection_close_;
  expects_continue_ = expects_continue_ && request_.minor_version >= 1;
  if (chunked_) {
    phase_ = Phase::kChunkSize;
  } else if (content_length_ > limits_.max_body_bytes) {
    Fail(413, absl::StrCat("request body of ", content_length_, " bytes is over the limit of ",
                           limits_.max_body_bytes, " bytes"));
  } else if (content_length_ > 0) {
    request_.body.reserve(content_length_);
    phase_ = Phase::kBody;
  } else {
    phase_ = Phase::kComplete;
  }
}

void HttpRequestParser::AppendBody(absl::string_view bytes) {
  body_started_ = true;
  request_.body.append(bytes.data(), bytes.size());
}

void HttpRequestParser::ReadBody(absl::string_view& data) {
  const size_t want = content_length_ - request_.body.size();
  const size_t take = std::min(want, data.size());
  AppendBody(data.substr(0, take));
  data.remove_prefix(take);
  if (request_.body.size() == content_length_) phase_ = Phase::kComplete;
}

void HttpRequestParser::ReadChunkLine(absl::string_view& data) {
  body_started_ = true;
  const size_t newline = data.find('\n');
  const size_t take = newline == absl::string_view::npos ? data.size() : newline + 1;
  line_.append(data.data(), take);
  data.remove_prefix(take);
  if (line_.size() > kMaxChunkLineBytes) {
    Fail(400, "malformed chunked body (chunk size line too long)");
    return;
  }
  if (newline == absl::string_view::npos) return;
  absl::string_view line = WithoutCr(absl::string_view(line_).substr(0, line_.size() - 1));
  line = absl::StripAsciiWhitespace(line.substr(0, line.find(';')));
  uint64_t size = 0;
  if (line.empty() || line.size() > 15) {
    Fail(400, "malformed chunked body (bad chunk size)");
    return;
  }
  for (char c : line) {
    if (HexValue(c) < 0) {
      Fail(400, "malformed chunked body (bad chunk size)");
      return;
    }
    size = size * 16 + HexValue(c);
  }
  line_.clear();
  if (size > limits_.max_body_bytes - request_.body.size()) {
    Fail(413, absl::StrCat("request body over the limit of ", limits_.max_body_bytes, " bytes"));
    return;
  }
  if (size == 0) {
    phase_ = Phase::kTrailer;
  } else {
    chunk_left_ = size;
    phase_ = Phase::kChunkData;
  }
}

void HttpRequestParser::ReadChunkData(absl::string_view& data) {
  const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk_left_, data.size()));
  AppendBody(data.substr(0, take));
  data.remove_prefix(take);
  chunk_left_ -= take;
  if (chunk_left_ == 0) phase_ = Phase::kChunkDataEnd;
}

void HttpRequestParser::ReadChunkDataEnd(absl::string_view& data) {
  const size_t newline = data.find('\n');
  const size_t take = newline == absl::string_view::npos ? data.size() : newline + 1;
  line_.append(data.data(), take);
  data.remove_prefix(take);
  if (line_.size() > 2 || (newline == absl::string_view::npos && line_ != "\r")) {
    Fail(400, "malformed chunked body (no line end after a chunk)");
    return;
  }
  if (newline == absl::string_view::npos) return;
  line_.clear();
  phase_ = Phase::kChunkSize;
}

void HttpRequestParser::ReadTrailer(absl::string_view& data) {
  const size_t newline = data.find('\n');
  const size_t take = newline == absl::string_view::npos ? data.size() : newline + 1;
  head_bytes_ += take;
  if (head_bytes_ > limits_.max_head_bytes) {
    Fail(431,
         absl::StrCat("request head and trailers longer than ", limits_.max_head_bytes, " bytes"));
    return;
  }
  line_.append(data.data(), take);
  data.remove_prefix(take);
  if (newline == absl::string_view::npos) return;
  const bool empty = WithoutCr(absl::string_view(line_).substr(0, line_.size() - 1)).empty();
  line_.clear();
  if (empty) phase_ = Phase::kComplete;  // trailer fields are read and dropped
}

}  // namespace tessera
