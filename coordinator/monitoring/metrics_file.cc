#include "coordinator/monitoring/metrics_file.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"

namespace tessera {

absl::StatusOr<std::shared_ptr<MetricsFile>> MetricsFile::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_file: cannot write ", path, ": ",
                                                   std::strerror(errno)));
  }
  return std::shared_ptr<MetricsFile>(new MetricsFile(path, file));
}

MetricsFile::~MetricsFile() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

void MetricsFile::Write(const nlohmann::json& line) {
  const std::string text = line.dump() + "\n";
  absl::MutexLock lock(&mu_);
  const bool written = std::fwrite(text.data(), 1, text.size(), file_) == text.size() &&
                       std::fflush(file_) == 0;
  if (!written && !warned_) {
    warned_ = true;
    Log().warn("--metrics_file: cannot write to {}: {}", path_, std::strerror(errno));
  }
}

}  // namespace tessera
