#include "core/ps/cow_snapshot.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/checkpoint/checkpoint.h"

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

static_assert(kSliceChunkBytes % kCowPageBytes == 0, "a chunk is a whole number of pages");

CowSnapshot::CowSnapshot(std::vector<ConstTensorView> tensors, UnfilledRows unfilled)
    : tensors_(std::move(tensors)),
      tensor_bytes_(BytesOf(tensors_)),
      row_bytes_(RowBytesOf(tensors_)),
      chunks_((tensor_bytes_ + kSliceChunkBytes - 1) / kSliceChunkBytes),
      pages_((tensor_bytes_ + kCowPageBytes - 1) / kCowPageBytes),
      unfilled_(std::move(unfilled)),
      live_(pages_ * static_cast<int64_t>(tensors_.size())),
      state_(tensors_.size(), std::vector<Page>(static_cast<size_t>(pages_), Page::kLive)),
      copies_(tensors_.size()) {}

absl::string_view CowSnapshot::Bytes(size_t tensor, int64_t begin, int64_t size) const {
  return absl::string_view(reinterpret_cast<const char*>(tensors_[tensor].data()) + begin,
                           static_cast<size_t>(size));
}

absl::string_view CowSnapshot::PageBytes(size_t tensor, int64_t page) const {
  const int64_t begin = page * kCowPageBytes;
  return Bytes(tensor, begin, std::min(kCowPageBytes, tensor_bytes_ - begin));
}

bool CowSnapshot::TouchesUnfilled(int64_t begin, int64_t size) const {
  if (unfilled_.rows.empty() || row_bytes_ == 0 || size <= 0) return false;
  const int64_t last = std::min<int64_t>((begin + size - 1) / row_bytes_,
                                         static_cast<int64_t>(unfilled_.rows.size()) - 1);
  for (int64_t row = begin / row_bytes_; row <= last; ++row) {
    if (unfilled_.rows[static_cast<size_t>(row)] != 0) return true;
  }
  return false;
}

bool CowSnapshot::OnlyUnfilled(int64_t page) const {
  if (unfilled_.rows.empty() || row_bytes_ == 0) return false;
  const int64_t begin = page * kCowPageBytes;
  const int64_t end = std::min(begin + kCowPageBytes, tensor_bytes_);
  for (int64_t row = begin / row_bytes_; row * row_bytes_ < end; ++row) {
    if (unfilled_.rows[static_cast<size_t>(row)] == 0) return false;
  }
  return true;
}

void CowSnapshot::FillRows(int64_t begin, char* chunk, int64_t size) const {
  if (!TouchesUnfilled(begin, size)) return;
  const int64_t rows = static_cast<int64_t>(unfilled_.rows.size());
  const int64_t end_row = std::min((begin + size + row_bytes_ - 1) / row_bytes_, rows);
  std::vector<float> computed;
  // Runs of consecutive unfilled rows, one call each; a run may stick out of the chunk.
  for (int64_t first = begin / row_bytes_; first < end_row;) {
    if (unfilled_.rows[static_cast<size_t>(first)] == 0) {
      ++first;
      continue;
    }
    int64_t end = first + 1;
    while (end < end_row && unfilled_.rows[static_cast<size_t>(end)] != 0) ++end;
    computed.resize(static_cast<size_t>((end - first) * row_bytes_) / sizeof(float));
    unfilled_.fill(first, TensorView(computed.data(), tensors_[0].shape().WithRows(end - first)));
    const int64_t from = std::max(first * row_bytes_, begin);
    const int64_t to = std::min(end * row_bytes_, begin + size);
    std::memcpy(chunk + (from - begin),
                reinterpret_cast<const char*>(computed.data()) + (from - first * row_bytes_),
                static_cast<size_t>(to - from));
    first = end;
  }
}

void CowSnapshot::Protect(std::unique_lock<std::mutex>& lock, int64_t first, int64_t last,
                          size_t tensors) {
  for (size_t t = 0; t < tensors; ++t) {
    for (int64_t p = first; p <= last; ++p) {
      Page& state = state_[t][static_cast<size_t>(p)];
      read_.wait(lock, [&state] { return state != Page::kReading; });
      if (state != Page::kLive) continue;
      live_.fetch_sub(1, std::memory_order_relaxed);
      if (t == 0 && OnlyUnfilled(p)) {
        state = Page::kFilled;
        continue;
      }
      const absl::string_view bytes = PageBytes(t, p);
      auto copy = std::make_unique<char[]>(bytes.size());
      std::memcpy(copy.get(), bytes.data(), bytes.size());
      copies_[t][p] = std::move(copy);
      copied_bytes_ += static_cast<int64_t>(bytes.size());
      state = Page::kCopied;
    }
  }
}

void CowSnapshot::BeforeWriteRows(absl::Span<const int64_t> rows) {
  ProtectRows(rows, tensors_.size());
}

void CowSnapshot::BeforeFillRows(absl::Span<const int64_t> rows) {
  ProtectRows(rows, std::min<size_t>(tensors_.size(), 1));
}

void CowSnapshot::BeforeWriteRange(int64_t begin, int64_t end) {
  ProtectRange(begin, end, tensors_.size());
}

void CowSnapshot::BeforeFillRange(int64_t begin, int64_t end) {
  ProtectRange(begin, end, std::min<size_t>(tensors_.size(), 1));
}

void CowSnapshot::ProtectRows(absl::Span<const int64_t> rows, size_t tensors) {
  if (finished() || live_.load(std::memory_order_acquire) == 0 || rows.empty()) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (finished()) return;
  const int64_t block_rows = row_bytes_ > 0 ? tensor_bytes_ / row_bytes_ : 0;
  for (const int64_t row : rows) {
    if (row < 0 || row >= block_rows) continue;  // the update's own checks refuse it
    const int64_t first = row * row_bytes_ / kCowPageBytes;
    const int64_t last = ((row + 1) * row_bytes_ - 1) / kCowPageBytes;
    Protect(lock, first, std::min(last, pages_ - 1), tensors);
  }
}

void CowSnapshot::ProtectRange(int64_t begin, int64_t end, size_t tensors) {
  const int64_t block_rows = row_bytes_ > 0 ? tensor_bytes_ / row_bytes_ : 0;
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, block_rows);
  if (finished() || live_.load(std::memory_order_acquire) == 0 || end <= begin) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (finished()) return;
  Protect(lock, begin * row_bytes_ / kCowPageBytes,
          std::min((end * row_bytes_ - 1) / kCowPageBytes, pages_ - 1), tensors);
}

void CowSnapshot::BeforeWriteAll() {
  if (finished() || live_.load(std::memory_order_acquire) == 0 || pages_ == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (finished()) return;
  Protect(lock, 0, pages_ - 1, tensors_.size());
}

absl::Status CowSnapshot::ReadChunk(size_t tensor, int64_t chunk,
                                    absl::FunctionRef<absl::Status(absl::string_view)> use) {
  if (tensor >= tensors_.size() || chunk < 0 || chunk >= chunks_) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: no chunk ", chunk, " of tensor ",
                                                   tensor, " (", tensors_.size(), " tensors of ",
                                                   chunks_, " chunks)"));
  }
  const int64_t begin = chunk * kSliceChunkBytes;
  const int64_t size = std::min(kSliceChunkBytes, tensor_bytes_ - begin);
  const int64_t first = begin / kCowPageBytes;
  const int64_t end = (begin + size + kCowPageBytes - 1) / kCowPageBytes;
  std::vector<Page>& states = state_[tensor];
  // The chunk's copies are taken (page -> copy) and its live pages become kReading: the shard
  // leaves them alone until they are kDone.
  std::vector<std::pair<int64_t, std::unique_ptr<char[]>>> copies;
  std::vector<int64_t> reading;
  std::unique_lock<std::mutex> lock(mu_);
  for (int64_t p = first; p < end; ++p) {
    if (states[static_cast<size_t>(p)] == Page::kReading ||
        states[static_cast<size_t>(p)] == Page::kDone) {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot: chunk ", chunk, " of tensor ", tensor, " was read before"));
    }
  }
  for (int64_t p = first; p < end; ++p) {
    Page& state = states[static_cast<size_t>(p)];
    if (state == Page::kCopied) {
      auto it = copies_[tensor].find(p);
      copied_bytes_ -= static_cast<int64_t>(PageBytes(tensor, p).size());
      copies.emplace_back(p, std::move(it->second));
      copies_[tensor].erase(it);
    } else if (state == Page::kLive) {
      reading.push_back(p);
    }
    state = state == Page::kLive ? Page::kReading : Page::kDone;
  }
  lock.unlock();
  auto release = [&] {
    lock.lock();
    for (const int64_t p : reading) states[static_cast<size_t>(p)] = Page::kDone;
    // Release: a shard that sees no live page left writes after this read.
    live_.fetch_sub(static_cast<int64_t>(reading.size()), std::memory_order_release);
    lock.unlock();
    read_.notify_all();
  };
  const absl::string_view live = Bytes(tensor, begin, size);
  if (static_cast<int64_t>(reading.size()) == end - first &&
      (tensor != 0 || !TouchesUnfilled(begin, size))) {
    // Untouched since the cut, and all of it as it was: read in place.
    absl::Status status = use(live);
    release();
    return status;
  }
  // Put together: the live pages from the shard's memory, the copies, and the unfilled rows
  // computed (a kFilled page is nothing but those).
  std::string assembled(static_cast<size_t>(size), '\0');
  for (const int64_t p : reading) {
    const absl::string_view bytes = PageBytes(tensor, p);
    std::memcpy(assembled.data() + (p * kCowPageBytes - begin), bytes.data(), bytes.size());
  }
  release();  // the shard's memory is read
  for (const auto& [page, copy] : copies) {
    std::memcpy(assembled.data() + (page * kCowPageBytes - begin), copy.get(),
                PageBytes(tensor, page).size());
  }
  copies.clear();
  if (tensor == 0) FillRows(begin, assembled.data(), size);
  return use(assembled);
}

void CowSnapshot::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_.store(true, std::memory_order_release);
  for (auto& copies : copies_) copies.clear();
  copied_bytes_ = 0;
}

int64_t CowSnapshot::copied_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copied_bytes_;
}

}  // namespace tessera
