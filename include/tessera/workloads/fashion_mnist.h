// Fashion-MNIST: readers for gzip'd IDX files and a loader for Debian's dataset-fashion-mnist
// (60k train / 10k test 28x28 grey images in 10 classes, docs/design.md §5).
//
// IDX (http://yann.lecun.com/exdb/mnist/): a big-endian header — two zero bytes, a type byte
// (0x08 = unsigned byte), the number of dims, then one uint32 per dim — followed by the values.
// Images are idx3 (magic 0x00000803: count, rows, cols), labels idx1 (0x00000801: count).
//
// Files are untrusted input: a missing file is NotFound (another failure to open or read, such
// as a directory or no permission, keeps its errno's canonical code); a file that is not gzip, is
// truncated, fails its CRC, has the wrong magic or dims, too few or too many bytes, or declares
// more than kMaxIdxPayloadBytes, is DataLoss naming the file and what is wrong. Reading never
// allocates more than the data actually present (plus one chunk), so absurd dims cannot exhaust
// memory.
//
// Thread-safety: pure functions (each call opens its own files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tessera/data.h"
#include "tessera/tensor.h"

namespace tessera {

// Where Debian's dataset-fashion-mnist package installs the files (scripts/setup.sh).
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
// The dense feature holding the pixels in a Fashion-MNIST Dataset: [n, 784] floats in [0, 1].
inline constexpr char kFashionMnistPixels[] = "pixels";
inline constexpr int64_t kFashionMnistImageSize = 28;
inline constexpr int64_t kFashionMnistNumClasses = 10;
// The largest IDX payload (count * rows * cols bytes) the readers accept: 1 GiB, 20x the
// Fashion-MNIST training images.
inline constexpr int64_t kMaxIdxPayloadBytes = int64_t{1} << 30;

// Images of an idx3 file: `pixels` is [count, rows * cols], each byte scaled by 1/255 into
// [0, 1], row-major within an image.
struct IdxImages {
  Tensor pixels;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Reads a gzip'd idx3 image file. NotFound / DataLoss as described above.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);
// Reads a gzip'd idx1 label file (one byte per example). NotFound / DataLoss as above.
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

enum class FashionMnistSplit { kTrain, kTest };

// Loads one split from `dir`: {train,t10k}-images-idx3-ubyte.gz and the matching
// -labels-idx1-ubyte.gz. Returns a Dataset with the dense feature kFashionMnistPixels
// ([n, 784] in [0, 1]) and labels [n, 1] holding the class index 0..9 as a float; it holds the
// images as their bytes and makes a batch's floats when the batch is read. NotFound when
// a file is missing (the message says to run scripts/setup.sh); DataLoss when a file is corrupt,
// the images are not 28x28, a label is >= 10, or the two files disagree on the count.
absl::StatusOr<Dataset> LoadFashionMnist(FashionMnistSplit split,
                                         absl::string_view dir = kFashionMnistDir);

}  // namespace tessera
