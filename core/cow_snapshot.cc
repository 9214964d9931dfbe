#include "core/cow_snapshot.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"

namespace tessera {
namespace {

int64_t BytesOf(const std::vector<ConstTensorView>& tensors) {
  return tensors.empty() ? 0 : tensors[0].size() * static_cast<int64_t>(sizeof(float));
}

int64_t RowBytesOf(const std::vector<ConstTensorView>& tensors) {
  if (tensors.empty()) return 0;
  const ConstTensorView& t = tensors[0];
  if (t.shape().rank() == 0) return static_cast<int64_t>(sizeof(float));
  return t.row_size() * static_cast<int64_t>(sizeof(float));
}

}  // namespace

CowSnapshot::CowSnapshot(std::vector<ConstTensorView> tensors)
    : tensors_(std::move(tensors)),
      tensor_bytes_(BytesOf(tensors_)),
      row_bytes_(RowBytesOf(tensors_)),
      chunks_((tensor_bytes_ + kSliceChunkBytes - 1) / kSliceChunkBytes),
      live_(chunks_ * static_cast<int64_t>(tensors_.size())),
      state_(tensors_.size(), std::vector<Chunk>(static_cast<size_t>(chunks_), Chunk::kLive)),
      copies_(tensors_.size()) {
  for (auto& copies : copies_) copies.resize(static_cast<size_t>(chunks_));
}

absl::string_view CowSnapshot::Bytes(size_t tensor, int64_t chunk) const {
  const int64_t begin = chunk * kSliceChunkBytes;
  const int64_t size = std::min(kSliceChunkBytes, tensor_bytes_ - begin);
  return absl::string_view(reinterpret_cast<const char*>(tensors_[tensor].data()) + begin,
                           static_cast<size_t>(size));
}

void CowSnapshot::Protect(std::unique_lock<std::mutex>& lock, int64_t first, int64_t last) {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    for (int64_t c = first; c <= last; ++c) {
      Chunk& state = state_[t][static_cast<size_t>(c)];
      read_.wait(lock, [&state] { return state != Chunk::kReading; });
      if (state != Chunk::kLive) continue;
      const absl::string_view bytes = Bytes(t, c);
      auto copy = std::make_unique<char[]>(bytes.size());
      std::memcpy(copy.get(), bytes.data(), bytes.size());
      copies_[t][static_cast<size_t>(c)] = std::move(copy);
      copied_bytes_ += static_cast<int64_t>(bytes.size());
      state = Chunk::kCopied;
      live_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

void CowSnapshot::BeforeWriteRows(absl::Span<const int64_t> rows) {
  if (finished() || live_.load(std::memory_order_acquire) == 0 || rows.empty()) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (finished()) return;
  const int64_t block_rows = row_bytes_ > 0 ? tensor_bytes_ / row_bytes_ : 0;
  for (const int64_t row : rows) {
    if (row < 0 || row >= block_rows) continue;  // the update's own checks refuse it
    const int64_t first = row * row_bytes_ / kSliceChunkBytes;
    const int64_t last = ((row + 1) * row_bytes_ - 1) / kSliceChunkBytes;
    Protect(lock, first, std::min(last, chunks_ - 1));
  }
}

void CowSnapshot::BeforeWriteRange(int64_t begin, int64_t end) {
  const int64_t block_rows = row_bytes_ > 0 ? tensor_bytes_ / row_bytes_ : 0;
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, block_rows);
  if (finished() || live_.load(std::memory_order_acquire) == 0 || end <= begin) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (finished()) return;
  Protect(lock, begin * row_bytes_ / kSliceChunkBytes,
          std::min((end * row_bytes_ - 1) / kSliceChunkBytes, chunks_ - 1));
}

void CowSnapshot::BeforeWriteAll() {
  if (finished() || live_.load(std::memory_order_acquire) == 0 || chunks_ == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (finished()) return;
  Protect(lock, 0, chunks_ - 1);
}

absl::Status CowSnapshot::ReadChunk(size_t tensor, int64_t chunk,
                                    absl::FunctionRef<absl::Status(absl::string_view)> use) {
  if (tensor >= tensors_.size() || chunk < 0 || chunk >= chunks_) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: no chunk ", chunk, " of tensor ",
                                                   tensor, " (", tensors_.size(), " tensors of ",
                                                   chunks_, " chunks)"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  Chunk& state = state_[tensor][static_cast<size_t>(chunk)];
  if (state == Chunk::kCopied) {
    std::unique_ptr<char[]> copy = std::move(copies_[tensor][static_cast<size_t>(chunk)]);
    const size_t size = Bytes(tensor, chunk).size();
    copied_bytes_ -= static_cast<int64_t>(size);
    state = Chunk::kDone;
    lock.unlock();
    return use(absl::string_view(copy.get(), size));
  }
  if (state != Chunk::kLive) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot: chunk ", chunk, " of tensor ", tensor, " was read before"));
  }
  // Read in place: the shard waits in Protect before writing here until this is done.
  state = Chunk::kReading;
  lock.unlock();
  absl::Status status = use(Bytes(tensor, chunk));
  lock.lock();
  state = Chunk::kDone;
  // Release: a shard that sees no live chunk left writes after this read.
  live_.fetch_sub(1, std::memory_order_release);
  read_.notify_all();
  return status;
}

void CowSnapshot::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_.store(true, std::memory_order_release);
  for (auto& copies : copies_) {
    for (auto& copy : copies) copy.reset();
  }
  copied_bytes_ = 0;
}

int64_t CowSnapshot::copied_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copied_bytes_;
}

}  // namespace tessera
