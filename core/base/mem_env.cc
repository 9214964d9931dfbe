#include "core/base/mem_env.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

// A file (with its bytes, shared with the handles open on it) or a directory.
struct Node {
  bool directory = false;
  std::shared_ptr<std::string> data;  // null for a directory
  std::shared_ptr<absl::Time> modified;  // a file's: when it was last written, shared likewise
};

// "a//b/./c/../d/" -> "/a/b/d"; "" and "/" -> "/".
std::string Normalize(const std::string& path) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

// The normalized parent of a normalized path other than the root.
std::string ParentOf(const std::string& normalized) {
  const size_t slash = normalized.rfind('/');
  return slash == 0 ? "/" : normalized.substr(0, slash);
}

// What every path strictly under normalized directory `dir` starts with.
std::string ChildPrefix(const std::string& dir) { return dir == "/" ? "/" : dir + "/"; }

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

// std::mutex rather than absl::Mutex, as in the rest of the code: ThreadSanitizer sees it (the
// system's Abseil is not built with TSan annotations).
struct MemEnv::State {
  std::mutex mu;
  // Normalized path -> node; the root "/" is always there.
  std::map<std::string, Node> nodes ABSL_GUARDED_BY(mu);
  absl::Time now ABSL_GUARDED_BY(mu);
  std::string fail_prefix ABSL_GUARDED_BY(mu);
  absl::Status fail_error ABSL_GUARDED_BY(mu);

  // The injected error when `normalized` is under the failing prefix, else OK.
  absl::Status Injected(const std::string& normalized, absl::string_view action)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (fail_error.ok() || !StartsWith(normalized, fail_prefix)) return absl::OkStatus();
    return absl::Status(fail_error.code(),
                        absl::StrCat(action, " ", normalized, ": ", fail_error.message()));
  }

  const Node* Find(const std::string& normalized) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = nodes.find(normalized);
    return it == nodes.end() ? nullptr : &it->second;
  }

  // Why `normalized` (absent) cannot be reached: a file on the way (FailedPrecondition, POSIX's
  // ENOTDIR), or not there (NotFound).
  absl::Status Missing(const std::string& normalized, absl::string_view action)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (std::string up = normalized; up != "/";) {
      up = ParentOf(up);
      const Node* node = Find(up);
      if (node != nullptr && !node->directory) {
        return absl::FailedPreconditionError(
            absl::StrCat(action, " ", normalized, ": ", up, " is not a directory"));
      }
    }
    return absl::NotFoundError(absl::StrCat(action, " ", normalized, ": no such file"));
  }

  // OK when the parent of `normalized` is an existing directory.
  absl::Status ParentIsDirectory(const std::string& normalized, absl::string_view action)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::string parent = ParentOf(normalized);
    const Node* node = Find(parent);
    if (node == nullptr) return Missing(parent, action);
    if (!node->directory) {
      return absl::FailedPreconditionError(
          absl::StrCat(action, " ", normalized, ": ", parent, " is not a directory"));
    }
    return absl::OkStatus();
  }

  bool HasChildren(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const std::string prefix = ChildPrefix(dir);
    auto it = nodes.lower_bound(prefix);
    if (it != nodes.end() && it->first == dir) ++it;  // the root is its own prefix
    return it != nodes.end() && StartsWith(it->first, prefix);
  }

  // Takes `path` and everything under it out of the map (sorted map: "/a/b-x" sorts between
  // "/a/b" and "/a/b/c", so the subtree is the node plus the range starting at "/a/b/").
  std::vector<std::pair<std::string, Node>> Extract(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<std::pair<std::string, Node>> out;
    auto self = nodes.find(path);
    if (self == nodes.end()) return out;
    out.emplace_back(self->first, std::move(self->second));
    nodes.erase(self);
    const std::string prefix = ChildPrefix(path);
    auto it = nodes.lower_bound(prefix);
    while (it != nodes.end() && StartsWith(it->first, prefix)) {
      out.emplace_back(it->first, std::move(it->second));
      it = nodes.erase(it);
    }
    return out;
  }
};

namespace {

class MemWritableFile : public WritableFile {
 public:
  MemWritableFile(std::shared_ptr<MemEnv::State> state, std::shared_ptr<std::string> data,
                  std::shared_ptr<absl::Time> modified, std::string path)
      : state_(std::move(state)),
        data_(std::move(data)),
        modified_(std::move(modified)),
        path_(std::move(path)) {}

  absl::Status WriteAt(uint64_t offset, absl::string_view bytes) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    absl::Status injected = state_->Injected(path_, "writing");
    if (!injected.ok()) return injected;
    if (data_->size() < offset + bytes.size()) data_->resize(offset + bytes.size());
    if (!bytes.empty()) std::memcpy(data_->data() + offset, bytes.data(), bytes.size());
    *modified_ = state_->now;
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    return state_->Injected(path_, "syncing");
  }

  absl::Status Close() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    closed_ = true;  // closed even when the close reports an error, as close(2)
    return state_->Injected(path_, "closing");
  }

 private:
  std::shared_ptr<MemEnv::State> state_;
  std::shared_ptr<std::string> data_;
  std::shared_ptr<absl::Time> modified_;
  std::string path_;
  bool closed_ = false;  // used by one thread (the WritableFile contract)
};

class MemRandomAccessFile : public RandomAccessFile {
 public:
  MemRandomAccessFile(std::shared_ptr<MemEnv::State> state, std::shared_ptr<std::string> data,
                      uint64_t size, std::string path)
      : state_(std::move(state)), data_(std::move(data)), size_(size), path_(std::move(path)) {}

  uint64_t size() const override { return size_; }

  absl::Status ReadAt(uint64_t offset, size_t n, char* out) override {
    if (offset > size_ || n > size_ - offset) {
      return absl::DataLossError(absl::StrCat(path_, ": reading ", n, " bytes at ", offset,
                                              ", past its end at ", size_));
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    if (data_->size() < offset + n) {
      return absl::DataLossError(absl::StrCat(path_, " ended at ", data_->size(), " of ", size_,
                                              " bytes (it shrank while being read)"));
    }
    if (n > 0) std::memcpy(out, data_->data() + offset, n);
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<MemEnv::State> state_;
  std::shared_ptr<std::string> data_;
  const uint64_t size_;
  const std::string path_;
};

}  // namespace

MemEnv::MemEnv(absl::Time now) : state_(std::make_shared<State>()) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->nodes["/"].directory = true;
  state_->now = now;
}

MemEnv::~MemEnv() = default;

std::unique_ptr<MemEnv> NewMemEnv() { return std::make_unique<MemEnv>(); }

void MemEnv::SetNow(absl::Time now) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->now = now;
}

void MemEnv::AdvanceClock(absl::Duration by) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->now += by;
}

absl::Time MemEnv::Now() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->now;
}

void MemEnv::FailWritesUnder(std::string path_prefix, absl::Status error) {
  std::lock_guard<std::mutex> lock(state_->mu);
  // Normalized as a path; a trailing partial name stays a prefix of longer names ("/d/f" fails
  // "/d/file" too), and a trailing '/' keeps the directory itself out ("/d/" spares "/d").
  std::string prefix = Normalize(path_prefix);
  if (!path_prefix.empty() && path_prefix.back() == '/' && prefix != "/") prefix += '/';
  state_->fail_prefix = std::move(prefix);
  state_->fail_error = std::move(error);
}

absl::Status MemEnv::CreateDirectories(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (absl::Status injected = state_->Injected(p, "creating directory"); !injected.ok()) {
    return injected;
  }
  // Check the whole way first, so a file in the way leaves nothing created.
  std::vector<std::string> missing;
  for (std::string at = p;; at = ParentOf(at)) {
    const Node* node = state_->Find(at);
    if (node != nullptr) {
      if (!node->directory) {
        return absl::FailedPreconditionError(
            absl::StrCat("creating directory ", p, ": ", at, " is not a directory"));
      }
      break;
    }
    missing.push_back(at);
  }
  for (const std::string& at : missing) state_->nodes[at].directory = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MemEnv::ListDirectory(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  const Node* node = state_->Find(p);
  if (node == nullptr) return state_->Missing(p, "listing");
  if (!node->directory) {
    return absl::FailedPreconditionError(absl::StrCat("listing ", p, ": not a directory"));
  }
  const std::string prefix = ChildPrefix(p);
  std::vector<std::string> names;
  for (auto it = state_->nodes.lower_bound(prefix);
       it != state_->nodes.end() && StartsWith(it->first, prefix); ++it) {
    const std::string rest = it->first.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) names.push_back(rest);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool MemEnv::FileExists(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->Find(p) != nullptr;
}

absl::StatusOr<uint64_t> MemEnv::FileSize(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  const Node* node = state_->Find(p);
  if (node == nullptr) return state_->Missing(p, "inspecting");
  if (node->directory) return absl::DataLossError(absl::StrCat(p, " is not a regular file"));
  return static_cast<uint64_t>(node->data->size());
}

absl::StatusOr<absl::Time> MemEnv::ModifiedTime(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  const Node* node = state_->Find(p);
  if (node == nullptr) return state_->Missing(p, "inspecting");
  if (node->directory) return absl::DataLossError(absl::StrCat(p, " is not a regular file"));
  return *node->modified;
}

absl::Status MemEnv::RemoveTree(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (absl::Status injected = state_->Injected(p, "removing"); !injected.ok()) return injected;
  if (state_->Find(p) == nullptr) return state_->Missing(p, "removing");
  if (p == "/") {
    return absl::InvalidArgumentError("removing /: the root of a MemEnv cannot be removed");
  }
  state_->Extract(p);
  return absl::OkStatus();
}

absl::Status MemEnv::RenameFile(const std::string& from, const std::string& to) {
  const std::string f = Normalize(from);
  const std::string t = Normalize(to);
  const std::string action = absl::StrCat("renaming ", f, " to");
  std::lock_guard<std::mutex> lock(state_->mu);
  if (absl::Status injected = state_->Injected(f, action); !injected.ok()) return injected;
  if (absl::Status injected = state_->Injected(t, action); !injected.ok()) return injected;
  const Node* source = state_->Find(f);
  if (source == nullptr) return state_->Missing(f, action);
  if (absl::Status parent = state_->ParentIsDirectory(t, action); !parent.ok()) return parent;
  if (f == t) return absl::OkStatus();
  if (f == "/" || StartsWith(t, ChildPrefix(f))) {
    return absl::InvalidArgumentError(absl::StrCat(action, " ", t, ": a directory cannot move ",
                                                   "under itself"));
  }
  const Node* target = state_->Find(t);
  if (target != nullptr) {
    if (!source->directory && target->directory) {
      return absl::FailedPreconditionError(absl::StrCat(action, " ", t, ": is a directory"));
    }
    if (source->directory && !target->directory) {
      return absl::FailedPreconditionError(absl::StrCat(action, " ", t, ": not a directory"));
    }
    if (target->directory && state_->HasChildren(t)) {
      return absl::FailedPreconditionError(absl::StrCat(action, " ", t, ": directory not empty"));
    }
  }
  // Move `f` and everything under it to `t`.
  state_->Extract(t);  // a replaced file, or an empty directory
  for (auto& [name, node] : state_->Extract(f)) {
    state_->nodes[t + name.substr(f.size())] = std::move(node);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> MemEnv::NewRandomAccessFile(
    const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  const Node* node = state_->Find(p);
  if (node == nullptr) return state_->Missing(p, "opening");
  if (node->directory) return absl::DataLossError(absl::StrCat(p, " is not a regular file"));
  return std::make_unique<MemRandomAccessFile>(state_, node->data, node->data->size(), p);
}

namespace {

// A copy of a file's bytes, in 8-byte words so that data() is aligned as a mapping's would be.
class MemMemoryRegion : public ReadOnlyMemoryRegion {
 public:
  explicit MemMemoryRegion(const std::string& bytes)
      : words_((bytes.size() + 7) / 8), size_(bytes.size()) {
    if (size_ > 0) std::memcpy(words_.data(), bytes.data(), bytes.size());
  }
  const char* data() const override { return reinterpret_cast<const char*>(words_.data()); }
  uint64_t size() const override { return size_; }

 private:
  std::vector<uint64_t> words_;
  uint64_t size_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> MemEnv::NewReadOnlyMemoryRegion(
    const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  const Node* node = state_->Find(p);
  if (node == nullptr) return state_->Missing(p, "opening");
  if (node->directory) return absl::DataLossError(absl::StrCat(p, " is not a regular file"));
  return std::make_unique<MemMemoryRegion>(*node->data);
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemEnv::NewWritableFile(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (absl::Status injected = state_->Injected(p, "creating"); !injected.ok()) return injected;
  if (absl::Status parent = state_->ParentIsDirectory(p, "creating"); !parent.ok()) return parent;
  Node& node = state_->nodes[p];
  if (node.directory) {
    return absl::FailedPreconditionError(absl::StrCat("creating ", p, ": is a directory"));
  }
  if (node.data == nullptr) {
    node.data = std::make_shared<std::string>();
    node.modified = std::make_shared<absl::Time>();
  } else {
    node.data->clear();  // truncated in place: handles open on it see it shrink, as with O_TRUNC
  }
  *node.modified = state_->now;
  return std::make_unique<MemWritableFile>(state_, node.data, node.modified, p);
}

absl::Status MemEnv::SyncDirectory(const std::string& path) {
  const std::string p = Normalize(path);
  std::lock_guard<std::mutex> lock(state_->mu);
  const Node* node = state_->Find(p);
  if (node == nullptr) return state_->Missing(p, "opening directory");
  if (!node->directory) {
    return absl::FailedPreconditionError(absl::StrCat("opening directory ", p, ": not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
