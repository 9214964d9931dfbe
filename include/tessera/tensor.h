// Shape, DType and Tensor: float32 row-major tensors with zero-copy row-block views.
//
// A Tensor owns its values and has value semantics (copying copies the values; moving is cheap).
// A TensorView / ConstTensorView is a non-owning window onto a Tensor's rows; it is valid while
// the Tensor lives and is not resized. "Rows" are the slices along axis 0, the only axis Tessera
// ever shards, so a row block of a variable is contiguous memory.
//
// Note [Tensor storage]
// A tensor's floats live in a block from calloc (zeros) or malloc (anything else), or in a
// std::vector<float> handed over by FromVector (adopted without a copy). Zeros come from calloc
// because a large block is fresh pages from the kernel, zero already: `Tensor(shape)` of a
// 600 MB embedding shard or of its all-zero optimizer slot costs no write pass and no memory
// until rows are touched (a std::vector would write every float, faulting in every page). A copy
// assigned to a tensor of the same size reuses its block (no new pages to fault in).
//
// Thread-safety: none of these types synchronize; concurrent const access is safe.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tessera {

// Element types a variable can be declared with. Tensor values are always float32; the dtype
// matters for partitioning (bytes per element) and for aggregation rules (MEAN needs a float).
enum class DType : int { kFloat32 = 1, kInt64 = 2, kString = 3 };

absl::string_view DTypeName(DType dtype);  // "float32", "int64", "string"
absl::StatusOr<DType> ParseDType(absl::string_view name);
// Bytes per element; a string counts `bytes_per_string` (TF's partitioner estimate).
int64_t DTypeSize(DType dtype, int64_t bytes_per_string = 16);
inline bool IsFloating(DType dtype) { return dtype == DType::kFloat32; }

// Row ids (global or shard-local as each API says).
using Ids = std::vector<int64_t>;

// Note [Limits on tensors from outside]
// A tensor or id list read from a message (actors/base/wire.h) or a file (schema/) is checked
// against one policy before anything is allocated for it: at most kMaxRank dimensions, no
// negative one, and at most kMaxElements elements (2^34: far above any real tensor, a guard
// against forged sizes). The wire and the files agree, so whatever one accepts the other can carry.
inline constexpr int kMaxRank = 8;
inline constexpr int64_t kMaxElements = int64_t{1} << 34;

class Shape {
 public:
  Shape() = default;  // rank 0: a scalar
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  // The checked constructor for untrusted dims: InvalidArgument when a dim is negative.
  static absl::StatusOr<Shape> Make(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t num_elements() const;
  // dim(0); 1 for a scalar.
  int64_t rows() const { return dims_.empty() ? 1 : dims_[0]; }
  // Elements per row: the product of dims 1..rank-1 (1 for rank <= 1).
  int64_t row_size() const;
  // The same trailing dims with `rows` rows (a scalar becomes [rows]).
  Shape WithRows(int64_t rows) const;
  // "[13, 4]"; "[]" for a scalar.
  std::string ToString() const;

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::vector<int64_t> dims_;
};

// InvalidArgument "<what>: shape [2, 3] does not match expected [2, 4]" unless got == want.
absl::Status CheckSameShape(const Shape& got, const Shape& want, absl::string_view what);

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A non-owning view; T is float (mutable) or const float.
template <typename T>
class BasicTensorView {
 public:
  using Matrix = std::conditional_t<std::is_const_v<T>, const RowMatrix, RowMatrix>;

  BasicTensorView() = default;
  BasicTensorView(T* data, Shape shape) : data_(data), shape_(std::move(shape)) {}
  // A mutable view converts to a const one.
  template <typename U, typename = std::enable_if_t<std::is_same_v<U, float> && std::is_const_v<T>>>
  BasicTensorView(const BasicTensorView<U>& other) : data_(other.data()), shape_(other.shape()) {}

  T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.num_elements(); }
  int64_t rows() const { return shape_.rows(); }
  int64_t row_size() const { return shape_.row_size(); }
  absl::Span<T> values() const { return absl::Span<T>(data_, size()); }
  absl::Span<T> row(int64_t i) const { return absl::Span<T>(data_ + i * row_size(), row_size()); }
  // Rows [begin, begin + count); the caller guarantees the range is inside the view.
  BasicTensorView RowBlock(int64_t begin, int64_t count) const {
    return BasicTensorView(data_ + begin * row_size(), shape_.WithRows(count));
  }
  // The view as a rows x row_size row-major Eigen matrix.
  Eigen::Map<Matrix> matrix() const { return Eigen::Map<Matrix>(data_, rows(), row_size()); }

 private:
  T* data_ = nullptr;
  Shape shape_{0};
};
using TensorView = BasicTensorView<float>;
using ConstTensorView = BasicTensorView<const float>;

class Tensor {
 public:
  Tensor() : shape_{0} {}
  // Zeros of `shape` (Note [Tensor storage]: untouched pages cost nothing).
  explicit Tensor(Shape shape);
  // `fill` everywhere; a fill of +0.0 is Tensor(shape).
  Tensor(Shape shape, float fill);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();
  // InvalidArgument when values.size() != shape.num_elements().
  static absl::StatusOr<Tensor> FromVector(Shape shape, std::vector<float> values);
  // A copy of the view's values.
  static Tensor Copy(ConstTensorView view);

  const Shape& shape() const { return shape_; }
  int64_t size() const { return size_; }
  int64_t rows() const { return shape_.rows(); }
  int64_t row_size() const { return shape_.row_size(); }
  float* data() { return data_; }
  const float* data() const { return data_; }
  absl::Span<float> values() { return absl::Span<float>(data_, static_cast<size_t>(size_)); }
  absl::Span<const float> values() const {
    return absl::Span<const float>(data_, static_cast<size_t>(size_));
  }
  absl::Span<float> row(int64_t i) { return view().row(i); }
  absl::Span<const float> row(int64_t i) const { return view().row(i); }

  TensorView view() { return TensorView(data(), shape_); }
  ConstTensorView view() const { return ConstTensorView(data(), shape_); }
  operator ConstTensorView() const { return view(); }
  TensorView RowBlock(int64_t begin, int64_t count) { return view().RowBlock(begin, count); }
  ConstTensorView RowBlock(int64_t begin, int64_t count) const {
    return view().RowBlock(begin, count);
  }
  Eigen::Map<RowMatrix> matrix() { return view().matrix(); }
  Eigen::Map<const RowMatrix> matrix() const { return view().matrix(); }

  // Same values, new shape; InvalidArgument when the element counts differ.
  absl::Status Reshape(Shape shape);
  // Makes this a tensor of zeros of `shape`, in its own memory when that is large enough (a
  // buffer reused step after step, whose row count changes, allocates only when it grows).
  void ResizeToZeros(const Shape& shape);

 private:
  // Allocates `n` floats as a block of this tensor's own: zeros when `zero`, else uninitialized
  // (the caller writes every one). Throws std::bad_alloc, as operator new, when out of memory.
  void AllocateBlock(int64_t n, bool zero);
  void FreeStorage();

  Shape shape_;
  float* data_ = nullptr;  // block_ or adopted_.data()
  int64_t size_ = 0;
  float* block_ = nullptr;  // malloc/calloc'd, owned; null when the values are adopted_
  int64_t block_capacity_ = 0;
  std::vector<float> adopted_;  // FromVector's values
};

}  // namespace tessera
