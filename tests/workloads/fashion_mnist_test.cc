#include "tessera/workloads/fashion_mnist.h"

#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

namespace tessera {
namespace {

using Bytes = std::vector<uint8_t>;

// A fresh directory under the system temp dir, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera_idx_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Bytes Idx(uint32_t magic, std::vector<uint32_t> dims, const Bytes& data) {
  Bytes out;
  auto put32 = [&](uint32_t v) {
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes Ramp(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 37 % 256);
  return b;
}

void WriteRaw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void WriteGzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(file) == Z_OK);
}

Bytes ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

absl::StatusCode ImagesCode(const std::string& path) { return ReadIdxImages(path).status().code(); }

TEST_CASE("the real Fashion-MNIST test split loads with 1000 images of each class") {
  absl::StatusOr<Dataset> test = LoadFashionMnist(FashionMnistSplit::kTest);
  // A missing package is a failure, not a skip: the message says to run scripts/setup.sh.
  REQUIRE_MESSAGE(test.ok(), test.status().ToString());
  CHECK(test->size() == 10000);
  CHECK(test->DenseFeatureShapes().at(kFashionMnistPixels) == (Shape{10000, 784}));
  absl::StatusOr<Batch> all = test->Slice(0, test->size());
  REQUIRE(all.ok());
  std::array<int, 10> counts{};
  for (float label : all->labels.values()) {
    REQUIRE(label >= 0);
    REQUIRE(label <= 9);
    REQUIRE(label == static_cast<int>(label));
    ++counts[static_cast<int>(label)];
  }
  for (int c = 0; c < 10; ++c) CHECK(counts[c] == 1000);
  const absl::Span<const float> pixels = all->dense.at(kFashionMnistPixels).values();
  const auto [lowest, highest] = std::minmax_element(pixels.begin(), pixels.end());
  CHECK(*lowest == 0.0f);
  CHECK(*highest == 1.0f);
}

TEST_CASE("small IDX files round-trip, pixels scaled into [0, 1]") {
  TempDir dir;
  const Bytes pixels = Ramp(3 * 2 * 5);
  WriteGzip(dir.File("images.gz"), Idx(0x803, {3, 2, 5}, pixels));
  WriteGzip(dir.File("labels.gz"), Idx(0x801, {4}, {7, 0, 255, 3}));
  absl::StatusOr<IdxImages> images = ReadIdxImages(dir.File("images.gz"));
  REQUIRE_MESSAGE(images.ok(), images.status().ToString());
  CHECK(images->rows == 2);
  CHECK(images->cols == 5);
  REQUIRE(images->pixels.shape() == (Shape{3, 10}));
  for (size_t i = 0; i < pixels.size(); ++i) {
    CHECK(images->pixels.values()[i] == static_cast<float>(pixels[i]) / 255.0f);
  }
  absl::StatusOr<Bytes> labels = ReadIdxLabels(dir.File("labels.gz"));
  REQUIRE(labels.ok());
  CHECK(*labels == Bytes{7, 0, 255, 3});
}

TEST_CASE("every truncation of a gzip'd IDX file is DataLoss") {
  TempDir dir;
  WriteGzip(dir.File("full.gz"), Idx(0x803, {3, 2, 5}, Ramp(30)));
  const Bytes full = ReadRaw(dir.File("full.gz"));
  REQUIRE(full.size() > 20);
  for (size_t length = 0; length < full.size(); ++length) {
    CAPTURE(length);
    WriteRaw(dir.File("cut.gz"), Bytes(full.begin(), full.begin() + length));
    CHECK(ImagesCode(dir.File("cut.gz")) == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("every truncation of the IDX content inside a valid gzip is DataLoss") {
  TempDir dir;
  for (const auto& [magic, dims, size] :
       std::vector<std::tuple<uint32_t, std::vector<uint32_t>, size_t>>{{0x803, {3, 2, 5}, 30},
                                                                        {0x801, {6}, 6}}) {
    const Bytes full = Idx(magic, dims, Ramp(size));
    for (size_t length = 0; length < full.size(); ++length) {
      CAPTURE(magic);
      CAPTURE(length);
      WriteGzip(dir.File("cut.gz"), Bytes(full.begin(), full.begin() + length));
      const absl::StatusCode code = magic == 0x803
                                        ? ImagesCode(dir.File("cut.gz"))
                                        : ReadIdxLabels(dir.File("cut.gz")).status().code();
      CHECK(code == absl::StatusCode::kDataLoss);
    }
  }
}

TEST_CASE("malformed IDX files are DataLoss with a message naming the problem") {
  struct Case {
    const char* name;
    Bytes content;
    bool gzip;
    const char* message;  // a substring of the error
  };
  Bytes extra = Idx(0x803, {1, 2, 2}, Ramp(4));
  extra.push_back(0);
  const std::vector<Case> cases = {
      {"label magic in an image file", Idx(0x801, {1, 2, 2}, Ramp(4)), true, "IDX magic"},
      {"signed-byte type", Idx(0x903, {1, 2, 2}, Ramp(4)), true, "IDX magic"},
      {"two dims", Idx(0x802, {2, 2}, Ramp(4)), true, "IDX magic"},
      {"not gzip", Idx(0x803, {1, 2, 2}, Ramp(4)), false, "not a gzip file"},
      {"short data", Idx(0x803, {2, 2, 2}, Ramp(7)), true, "truncated"},
      {"extra data", extra, true, "unexpected bytes"},
      // 2^32 - 1 images of 28x28 would be 3 TB: refused from the header alone.
      {"absurd dims", Idx(0x803, {0xFFFFFFFFu, 28, 28}, Ramp(16)), true, "limit"},
      {"absurd single dim", Idx(0x803, {1, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}), true, "limit"},
      // 784 MB declared, under the limit, but 16 bytes present: nothing large is allocated.
      {"large dims, little data", Idx(0x803, {1000000, 28, 28}, Ramp(16)), true, "truncated"},
  };
  TempDir dir;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir.File("bad.gz");
    if (c.gzip) {
      WriteGzip(path, c.content);
    } else {
      WriteRaw(path, c.content);
    }
    const absl::Status status = ReadIdxImages(path).status();
    CAPTURE(status.ToString());
    CHECK(status.code() == absl::StatusCode::kDataLoss);
    CHECK(std::string(status.message()).find(c.message) != std::string::npos);
    CHECK(std::string(status.message()).find(path) != std::string::npos);
  }
}

TEST_CASE("a damaged gzip trailer (CRC or length) is DataLoss") {
  TempDir dir;
  WriteGzip(dir.File("ok.gz"), Idx(0x801, {5}, Ramp(5)));
  const Bytes good = ReadRaw(dir.File("ok.gz"));
  // The last 8 bytes are the CRC-32 and the uncompressed length; zlib checks both.
  for (size_t i = good.size() - 8; i < good.size(); ++i) {
    CAPTURE(i);
    Bytes bad = good;
    bad[i] ^= 0x40;
    WriteRaw(dir.File("bad.gz"), bad);
    CHECK(ReadIdxLabels(dir.File("bad.gz")).status().code() == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("a missing file is NotFound") {
  TempDir dir;
  CHECK(ImagesCode(dir.File("absent.gz")) == absl::StatusCode::kNotFound);
  const absl::Status status =
      LoadFashionMnist(FashionMnistSplit::kTrain, dir.File("absent")).status();
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(std::string(status.message()).find("scripts/setup.sh") != std::string::npos);
}

TEST_CASE("LoadFashionMnist checks image size, labels and counts") {
  struct Case {
    const char* name;
    Bytes images;
    Bytes labels;
    absl::StatusCode code;
  };
  const Bytes three_images = Idx(0x803, {3, 28, 28}, Ramp(3 * 784));
  const std::vector<Case> cases = {
      {"valid", three_images, Idx(0x801, {3}, {9, 0, 4}), absl::StatusCode::kOk},
      {"label count mismatch", three_images, Idx(0x801, {4}, {9, 0, 4, 1}),
       absl::StatusCode::kDataLoss},
      {"label out of range", three_images, Idx(0x801, {3}, {9, 10, 4}),
       absl::StatusCode::kDataLoss},
      {"wrong image size", Idx(0x803, {3, 27, 28}, Ramp(3 * 27 * 28)), Idx(0x801, {3}, {1, 2, 3}),
       absl::StatusCode::kDataLoss},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir dir;
    WriteGzip(dir.File("t10k-images-idx3-ubyte.gz"), c.images);
    WriteGzip(dir.File("t10k-labels-idx1-ubyte.gz"), c.labels);
    absl::StatusOr<Dataset> d = LoadFashionMnist(FashionMnistSplit::kTest, dir.path());
    CAPTURE(d.status().ToString());
    CHECK(d.status().code() == c.code);
    if (!d.ok()) continue;
    absl::StatusOr<Batch> all = d->Slice(0, d->size());
    REQUIRE(all.ok());
    CHECK(all->labels.values()[0] == 9.0f);
    CHECK(all->labels.values()[2] == 4.0f);
    const Tensor& pixels = all->dense.at(kFashionMnistPixels);
    REQUIRE(pixels.shape() == (Shape{3, 784}));
    CHECK(pixels.row(2)[5] == static_cast<float>(Ramp(3 * 784)[2 * 784 + 5]) / 255.0f);
  }
}

}  // namespace
}  // namespace tessera
