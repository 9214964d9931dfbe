#include "tessera/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kFloat32, DType::kInt64, DType::kString}) {
    if (DTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected float32, int64 or string)"));
}

int64_t DTypeSize(DType dtype, int64_t bytes_per_string) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
    case DType::kString: return bytes_per_string;
  }
  return 0;
}

absl::StatusOr<Shape> Shape::Make(std::vector<int64_t> dims) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(dims, ", "),
                                                     "] has a negative dimension at axis ", i));
    }
  }
  return Shape(std::move(dims));
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::row_size() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims_.size(); ++i) n *= dims_[i];
  return n;
}

Shape Shape::WithRows(int64_t rows) const {
  std::vector<int64_t> dims = dims_;
  if (dims.empty()) return Shape({rows});
  dims[0] = rows;
  return Shape(std::move(dims));
}

std::string Shape::ToString() const { return absl::StrCat("[", absl::StrJoin(dims_, ", "), "]"); }

absl::Status CheckSameShape(const Shape& got, const Shape& want, absl::string_view what) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", got.ToString(),
                                                 " does not match expected ", want.ToString()));
}

Tensor::Tensor(Shape shape) : shape_(std::move(shape)) {
  AllocateBlock(shape_.num_elements(), /*zero=*/true);
}

Tensor::Tensor(Shape shape, float fill) : shape_(std::move(shape)) {
  // Only +0.0 is all zero bits; -0.0 must be written.
  const bool zero = std::signbit(fill) == false && fill == 0.0f;
  AllocateBlock(shape_.num_elements(), zero);
  if (!zero) std::fill(data_, data_ + size_, fill);
}

Tensor::Tensor(const Tensor& other) : shape_(other.shape_) {
  AllocateBlock(other.size_, /*zero=*/false);
  if (size_ > 0) std::memcpy(data_, other.data_, static_cast<size_t>(size_) * sizeof(float));
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  // Note [Tensor storage]: a block big enough is reused, so its pages need no faulting in.
  const bool reuse = block_ != nullptr && block_capacity_ >= other.size_;
  if (!reuse) {
    FreeStorage();
    AllocateBlock(other.size_, /*zero=*/false);
  } else {
    data_ = block_;
    size_ = other.size_;
  }
  shape_ = other.shape_;
  if (size_ > 0) std::memcpy(data_, other.data_, static_cast<size_t>(size_) * sizeof(float));
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : shape_(std::move(other.shape_)),
      data_(other.data_),
      size_(other.size_),
      block_(other.block_),
      block_capacity_(other.block_capacity_),
      adopted_(std::move(other.adopted_)) {
  other.shape_ = Shape{0};
  other.data_ = nullptr;
  other.size_ = 0;
  other.block_ = nullptr;
  other.block_capacity_ = 0;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this == &other) return *this;
  FreeStorage();
  shape_ = std::move(other.shape_);
  data_ = other.data_;
  size_ = other.size_;
  block_ = other.block_;
  block_capacity_ = other.block_capacity_;
  adopted_ = std::move(other.adopted_);
  other.shape_ = Shape{0};
  other.data_ = nullptr;
  other.size_ = 0;
  other.block_ = nullptr;
  other.block_capacity_ = 0;
  return *this;
}

Tensor::~Tensor() { FreeStorage(); }

void Tensor::AllocateBlock(int64_t n, bool zero) {
  size_ = n;
  if (n == 0) {
    data_ = nullptr;
    return;
  }
  const size_t count = static_cast<size_t>(n);
  void* block = zero ? std::calloc(count, sizeof(float)) : std::malloc(count * sizeof(float));
  if (block == nullptr) throw std::bad_alloc();
  block_ = static_cast<float*>(block);
  block_capacity_ = n;
  data_ = block_;
}

void Tensor::FreeStorage() {
  std::free(block_);
  block_ = nullptr;
  block_capacity_ = 0;
  adopted_ = std::vector<float>();
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<Tensor> Tensor::FromVector(Shape shape, std::vector<float> values) {
  if (static_cast<int64_t>(values.size()) != shape.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", shape.ToString(), " needs ",
                                                   shape.num_elements(), " values, got ",
                                                   values.size()));
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.adopted_ = std::move(values);
  t.data_ = t.adopted_.data();
  t.size_ = static_cast<int64_t>(t.adopted_.size());
  return t;
}

Tensor Tensor::Copy(ConstTensorView view) {
  Tensor t;
  t.shape_ = view.shape();
  t.AllocateBlock(view.size(), /*zero=*/false);
  if (t.size_ > 0) {
    std::memcpy(t.data_, view.data(), static_cast<size_t>(t.size_) * sizeof(float));
  }
  return t;
}

absl::Status Tensor::Reshape(Shape shape) {
  if (shape.num_elements() != size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_.ToString(), " (",
                                                   size(), " values) to ", shape.ToString()));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

void Tensor::ResizeToZeros(const Shape& shape) {
  const int64_t n = shape.num_elements();
  if (block_ != nullptr && block_capacity_ >= n) {
    data_ = block_;
    size_ = n;
    std::fill(data_, data_ + n, 0.0f);
  } else if (block_ == nullptr && static_cast<int64_t>(adopted_.capacity()) >= n && n > 0) {
    adopted_.assign(static_cast<size_t>(n), 0.0f);
    data_ = adopted_.data();
    size_ = n;
  } else {
    FreeStorage();
    AllocateBlock(n, /*zero=*/true);
  }
  shape_ = shape;
}

}  // namespace tessera
