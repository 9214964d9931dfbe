#include "http/request_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

bool Unsafe(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u <= 0x20 || u >= 0x7f || c == '\\';
}

// Appends `text` with the bytes a log line must not hold raw escaped ("-" when empty).
void AppendEscaped(std::string& line, absl::string_view text) {
  if (text.empty()) {
    line += '-';
    return;
  }
  if (std::none_of(text.begin(), text.end(), Unsafe)) {
    line.append(text.data(), text.size());
    return;
  }
  for (const char c : text) {
    if (Unsafe(c)) {
      absl::StrAppendFormat(&line, "\\x%02X", static_cast<unsigned char>(c));
    } else {
      line += c;
    }
  }
}

// Three digits, "007".
void AppendThreeDigits(std::string& line, int64_t value) {
  const char digits[3] = {static_cast<char>('0' + value / 100 % 10),
                          static_cast<char>('0' + value / 10 % 10),
                          static_cast<char>('0' + value % 10)};
  line.append(digits, 3);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RequestLog>> RequestLog::Open(const std::string& path) {
  if (path == "-") return std::unique_ptr<RequestLog>(new RequestLog(STDERR_FILENO, false));
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the request log '", path, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<RequestLog>(new RequestLog(fd, true));
}

RequestLog::RequestLog(int fd, bool owned) : fd_(fd), owned_(owned) {
  writer_ = std::thread([this] { Write(); });
}

RequestLog::~RequestLog() {
  Flush(/*now=*/true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  writer_.join();
  if (owned_) ::close(fd_);
}

void RequestLog::Record(absl::string_view method, absl::string_view target, int status,
                        size_t request_bytes, size_t response_bytes,
                        std::chrono::nanoseconds latency) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const int64_t millis = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  const int64_t second = millis / 1000;
  if (second != second_) {
    const time_t t = static_cast<time_t>(second);
    tm utc{};
    gmtime_r(&t, &utc);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
    second_text_ = text;
    second_ = second;
  }
  // Formatted by hand: this runs on the server's event loop for every request.
  lines_ += second_text_;
  lines_ += '.';
  AppendThreeDigits(lines_, millis % 1000);
  lines_ += "Z ";
  AppendEscaped(lines_, method);
  lines_ += ' ';
  AppendEscaped(lines_, target);
  const int64_t micros = std::chrono::duration_cast<std::chrono::microseconds>(latency).count();
  absl::StrAppend(&lines_, " ", status, " ", request_bytes, " ", response_bytes, " ", micros / 1000,
                  ".");
  AppendThreeDigits(lines_, micros % 1000);
  lines_ += '\n';
}

void RequestLog::Flush(bool now) {
  if (lines_.empty()) return;
  const auto time = std::chrono::steady_clock::now();
  if (!now && lines_.size() < kHandOverBytes && time - handed_over_ < kHandOverInterval) return;
  handed_over_ = time;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.size() > kMaxPendingBytes) {
      dropped_ += static_cast<uint64_t>(std::count(lines_.begin(), lines_.end(), '\n'));
    } else if (pending_.empty()) {
      pending_.swap(lines_);
    } else {
      pending_ += lines_;
    }
  }
  lines_.clear();
  ready_.notify_one();
}

void RequestLog::Write() {
  std::string writing;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty() && stopping_) return;
    writing.clear();
    writing.swap(pending_);
    const uint64_t dropped = dropped_;
    dropped_ = 0;
    lock.unlock();
    if (dropped > 0) {
      absl::StrAppend(&writing, "request log: ", dropped,
                      " lines dropped (the log was not keeping up)\n");
    }
    for (size_t at = 0; at < writing.size();) {
      const ssize_t n = ::write(fd_, writing.data() + at, writing.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // a log that cannot be written is not the server's failure
      at += static_cast<size_t>(n);
    }
    lock.lock();
  }
}

}  // namespace tessera
