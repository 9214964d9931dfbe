// FailingEnv: an Env over another whose changes to some paths fail, for the checkpoint tests.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tessera/env.h"
#include "tessera/status.h"

namespace tessera::testing {

// An Env over another (a MemEnv, the real one) whose every change to a path containing `fragment`
// fails with `error` — a full disk for the files of one name, wherever the random temporary
// directories put them.
class FailingEnv final : public Env {
 public:
  explicit FailingEnv(Env* base) : base_(base) {}
  void Fail(std::string fragment, absl::Status error) {
    fragment_ = std::move(fragment);
    error_ = std::move(error);
  }

  absl::Status CreateDirectories(const std::string& path) override {
    TESSERA_RETURN_IF_ERROR(Check(path));
    return base_->CreateDirectories(path);
  }
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    return base_->ListDirectory(path);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    return base_->FileSize(path);
  }
  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override {
    return base_->ModifiedTime(path);
  }
  absl::Status RemoveTree(const std::string& path) override {
    TESSERA_RETURN_IF_ERROR(Check(path));
    return base_->RemoveTree(path);
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    TESSERA_RETURN_IF_ERROR(Check(from));
    TESSERA_RETURN_IF_ERROR(Check(to));
    return base_->RenameFile(from, to);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return base_->NewRandomAccessFile(path);
  }
  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> NewReadOnlyMemoryRegion(
      const std::string& path) override {
    return base_->NewReadOnlyMemoryRegion(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    TESSERA_RETURN_IF_ERROR(Check(path));
    return base_->NewWritableFile(path);
  }
  absl::Status SyncDirectory(const std::string& path) override {
    return base_->SyncDirectory(path);
  }
  absl::Time Now() override { return base_->Now(); }

 private:
  absl::Status Check(const std::string& path) const {
    if (error_.ok() || !absl::StrContains(path, fragment_)) return absl::OkStatus();
    return Annotate(error_, path);
  }

  Env* base_;
  std::string fragment_;
  absl::Status error_;
};

}  // namespace tessera::testing
