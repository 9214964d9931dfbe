#include "tessera/workloads/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "tessera/status.h"

namespace tessera {
namespace {

constexpr uint32_t kIdx3UbyteMagic = 0x00000803;
constexpr uint32_t kIdx1UbyteMagic = 0x00000801;
// Decompressed bytes requested per gzread: bounds the memory committed ahead of the data.
constexpr int64_t kReadChunkBytes = int64_t{4} << 20;

// A gzip file opened for reading; every read failure becomes DataLoss naming the file.
class GzipReader {
 public:
  static absl::StatusOr<GzipReader> Open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      const int error = errno;
      if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
      return absl::ErrnoToStatus(error, absl::StrCat("cannot open ", path));
    }
    gzbuffer(file, 128 * 1024);
    return GzipReader(path, file);
  }
  GzipReader(GzipReader&& other) noexcept
      : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}
  GzipReader& operator=(GzipReader&&) = delete;
  ~GzipReader() {
    if (file_ != nullptr) gzclose_r(file_);
  }

  // Reads exactly `size` bytes describing `what`. DataLoss when the file is not gzip, its
  // compressed data is corrupt or truncated, or it holds fewer bytes.
  absl::Status ReadExactly(uint8_t* out, int64_t size, absl::string_view what) {
    int64_t got = 0;
    while (got < size) {
      const int64_t want = std::min(size - got, kReadChunkBytes);
      const int n = gzread(file_, out + got, static_cast<unsigned>(want));
      if (n > 0) got += n;
      TESSERA_RETURN_IF_ERROR(CheckGzip());
      if (n <= 0) break;
    }
    if (got == size) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(path_, ": truncated: ", what, " needs ", size,
                                            " bytes, the file holds only ", got));
  }

  // Reads `size` bytes as a list of chunks, allocating only as the data arrives (a header may
  // lie about the size) and never copying it to grow a buffer.
  absl::StatusOr<std::vector<std::vector<uint8_t>>> ReadPayload(int64_t size,
                                                                absl::string_view what) {
    std::vector<std::vector<uint8_t>> chunks;
    int64_t got = 0;
    while (got < size) {
      const int64_t want = std::min(size - got, kReadChunkBytes);
      std::vector<uint8_t> chunk(want);
      const int n = gzread(file_, chunk.data(), static_cast<unsigned>(want));
      TESSERA_RETURN_IF_ERROR(CheckGzip());
      if (n > 0) {
        chunk.resize(n);
        got += n;
        chunks.push_back(std::move(chunk));
      }
      if (n < want) break;
    }
    if (got != size) {
      return absl::DataLossError(absl::StrCat(path_, ": truncated: ", what, " needs ", size,
                                              " bytes, the file holds only ", got));
    }
    return chunks;
  }

  // Checks the file ends here, which also makes zlib verify the gzip trailer (CRC and length).
  absl::Status ExpectEnd() {
    uint8_t extra[64];
    int64_t total = 0;
    for (;;) {
      const int n = gzread(file_, extra, sizeof(extra));
      TESSERA_RETURN_IF_ERROR(CheckGzip());
      if (n <= 0) break;
      total += n;
    }
    if (total == 0) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat(path_, ": ", total, " unexpected bytes after the declared data"));
  }

  const std::string& path() const { return path_; }

 private:
  GzipReader(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  // Called right after each gzread, while errno still describes a failed read.
  absl::Status CheckGzip() {
    const int read_errno = errno;
    int code = Z_OK;
    absl::string_view message = gzerror(file_, &code);
    // zlib prefixes its message with the path; ours already names the file.
    absl::ConsumePrefix(&message, absl::StrCat(path_, ": "));
    if (code == Z_ERRNO) {
      return absl::ErrnoToStatus(read_errno, absl::StrCat("cannot read ", path_));
    }
    if (code == Z_BUF_ERROR) {
      return absl::DataLossError(absl::StrCat(path_, ": truncated gzip stream (", message, ")"));
    }
    if (code != Z_OK && code != Z_STREAM_END) {
      return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip data (", message, ")"));
    }
    // zlib passes a file without the gzip magic through unchanged; an IDX file must be gzip'd.
    if (gzdirect(file_)) {
      return absl::DataLossError(absl::StrCat(path_, ": not a gzip file"));
    }
    return absl::OkStatus();
  }

  std::string path_;
  gzFile file_;
};

uint32_t BigEndian32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// Reads the header of an IDX file holding unsigned bytes: checks the magic and returns the
// dims, whose product must not exceed kMaxIdxPayloadBytes.
absl::StatusOr<std::vector<int64_t>> ReadIdxHeader(GzipReader& reader, uint32_t magic,
                                                   int num_dims) {
  std::array<uint8_t, 16> header{};
  const int64_t header_bytes = 4 + 4 * int64_t{num_dims};
  TESSERA_RETURN_IF_ERROR(reader.ReadExactly(header.data(), header_bytes, "the IDX header"));
  const uint32_t got_magic = BigEndian32(header.data());
  if (got_magic != magic) {
    return absl::DataLossError(
        absl::StrFormat("%s: IDX magic is 0x%08x, expected 0x%08x (unsigned bytes, %d dims)",
                        reader.path(), got_magic, magic, num_dims));
  }
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int d = 0; d < num_dims; ++d) {
    dims.push_back(BigEndian32(header.data() + 4 + 4 * d));
    // Each dim is < 2^32 and total <= 2^30 before the product, so it cannot overflow.
    total *= dims.back();
    if (total > kMaxIdxPayloadBytes) {
      return absl::DataLossError(absl::StrCat(reader.path(), ": IDX dims declare more than the ",
                                              kMaxIdxPayloadBytes, "-byte limit"));
    }
  }
  return dims;
}

// Pixel byte v as the model sees it: v / 255.
float PixelValue(uint8_t v) { return static_cast<float>(v) / 255.0f; }

// An idx3 file's images as the bytes they are (a quarter of their floats).
struct IdxImageBytes {
  std::vector<uint8_t> bytes;  // count * rows * cols, row-major within an image
  int64_t count = 0, rows = 0, cols = 0;
};

absl::StatusOr<IdxImageBytes> ReadIdxImageBytes(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(GzipReader reader, GzipReader::Open(path));
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReadIdxHeader(reader, kIdx3UbyteMagic, 3));
  IdxImageBytes images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  const int64_t size = images.count * images.rows * images.cols;
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> chunks,
                           reader.ReadPayload(size, absl::StrCat(images.count, " images")));
  TESSERA_RETURN_IF_ERROR(reader.ExpectEnd());
  images.bytes.reserve(size);
  for (std::vector<uint8_t>& chunk : chunks) {
    images.bytes.insert(images.bytes.end(), chunk.begin(), chunk.end());
    std::vector<uint8_t>().swap(chunk);  // free as we go
  }
  return images;
}

// A split as an ExampleSource over its bytes: a batch's pixels become floats only when it is
// read, so a worker holds the split's 47 MB of bytes (gzip cannot be read from the middle: the
// file is inflated once), never its 188 MB of floats.
class FashionMnistExamples final : public ExampleSource {
 public:
  FashionMnistExamples(IdxImageBytes images, std::vector<uint8_t> labels)
      : images_(std::move(images)), labels_(std::move(labels)) {
    schema_.dense_features.emplace(kFashionMnistPixels, Shape{images_.rows * images_.cols});
  }

  int64_t size() const override { return images_.count; }
  const ExampleSchema& schema() const override { return schema_; }

  absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override {
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t width = images_.rows * images_.cols;
    Batch batch;
    batch.size = n;
    Tensor pixels(Shape{n, width});
    batch.labels = Tensor(Shape{n, 1});
    for (int64_t k = 0; k < n; ++k) {
      const uint8_t* image = images_.bytes.data() + rows[k] * width;
      float* out = pixels.data() + k * width;
      for (int64_t j = 0; j < width; ++j) out[j] = PixelValue(image[j]);
      batch.labels.data()[k] = labels_[rows[k]];
    }
    batch.dense.emplace(kFashionMnistPixels, std::move(pixels));
    return batch;
  }

 private:
  IdxImageBytes images_;
  std::vector<uint8_t> labels_;
  ExampleSchema schema_;
};

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(IdxImageBytes images, ReadIdxImageBytes(path));
  const int64_t size = static_cast<int64_t>(images.bytes.size());
  std::vector<float> values(size);
  for (int64_t i = 0; i < size; ++i) values[i] = PixelValue(images.bytes[i]);
  TESSERA_ASSIGN_OR_RETURN(
      Tensor pixels,
      Tensor::FromVector(Shape{images.count, images.rows * images.cols}, std::move(values)));
  return IdxImages{std::move(pixels), images.rows, images.cols};
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(GzipReader reader, GzipReader::Open(path));
  TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ReadIdxHeader(reader, kIdx1UbyteMagic, 1));
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::vector<uint8_t>> chunks,
                           reader.ReadPayload(dims[0], absl::StrCat(dims[0], " labels")));
  TESSERA_RETURN_IF_ERROR(reader.ExpectEnd());
  std::vector<uint8_t> labels;
  labels.reserve(dims[0]);
  for (const std::vector<uint8_t>& chunk : chunks) {
    labels.insert(labels.end(), chunk.begin(), chunk.end());
  }
  return labels;
}

absl::StatusOr<Dataset> LoadFashionMnist(FashionMnistSplit split, absl::string_view dir) {
  const absl::string_view prefix = split == FashionMnistSplit::kTrain ? "train" : "t10k";
  const std::string images_path = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz");
  const std::string labels_path = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz");
  auto explain = [](absl::Status status) {
    if (!absl::IsNotFound(status)) return status;
    return absl::NotFoundError(
        absl::StrCat(status.message(),
                     " (Fashion-MNIST comes from Debian's dataset-fashion-mnist: run "
                     "scripts/setup.sh)"));
  };
  absl::StatusOr<IdxImageBytes> images = ReadIdxImageBytes(images_path);
  if (!images.ok()) return explain(images.status());
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(labels_path);
  if (!labels.ok()) return explain(labels.status());

  if (images->rows != kFashionMnistImageSize || images->cols != kFashionMnistImageSize) {
    return absl::DataLossError(absl::StrCat(images_path, ": images are ", images->rows, "x",
                                            images->cols, ", expected 28x28"));
  }
  const int64_t count = images->count;
  if (static_cast<int64_t>(labels->size()) != count) {
    return absl::DataLossError(absl::StrCat(labels_path, " holds ", labels->size(), " labels but ",
                                            images_path, " holds ", count, " images"));
  }
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = (*labels)[i];
    if (label >= kFashionMnistNumClasses) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{label}, " of example ",
                                              i, " is not a class in [0, 10)"));
    }
  }
  return Dataset::FromSource(
      std::make_shared<FashionMnistExamples>(*std::move(images), *std::move(labels)));
}

}  // namespace tessera
