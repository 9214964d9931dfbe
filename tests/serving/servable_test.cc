#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "schema/serving/model_io.h"
#include "tessera/serving.h"
#include "tessera/version.h"
#include "tests/cli/cli_test_util.h"

namespace tessera {
namespace {

using testing::TempDir;
using testing::TinyRecsysModel;

Batch TwoExamples() {
  Batch batch;
  batch.size = 2;
  batch.ids["user"] = {4, 0};
  batch.ids["item"] = {1, 3};
  return batch;
}

TEST_CASE("a servable answers as the model's own predictor, and says what it is") {
  TempDir dir;
  const ExportedModel exported = TinyRecsysModel();
  REQUIRE(WriteExportedModel(dir.path(), exported).ok());
  absl::StatusOr<std::unique_ptr<Servable>> loaded = Servable::Load(dir.path());
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().ToString());
  const Servable& servable = **loaded;
  CHECK(servable.step() == 42);
  CHECK(servable.writer_version() == Version());
  CHECK(servable.spec().name == exported.spec.name);
  CHECK(servable.spec().params.size() == exported.spec.params.size());

  const absl::StatusOr<std::map<std::string, Tensor>> served = servable.Predict(TwoExamples());
  REQUIRE_MESSAGE(served.ok(), served.status().ToString());
  const std::unique_ptr<Predictor> reference = testing::TinyRecsysPredictor();
  const absl::StatusOr<std::map<std::string, Tensor>> expected = reference->Predict(TwoExamples());
  REQUIRE(expected.ok());
  REQUIRE(served->size() == expected->size());
  for (const auto& [name, tensor] : *expected) {
    REQUIRE(served->count(name) == 1);
    const Tensor& got = served->at(name);
    REQUIRE(got.shape() == tensor.shape());
    for (int64_t i = 0; i < tensor.size(); ++i) {
      CHECK(got.data()[i] == tensor.data()[i]);
    }
  }
}

TEST_CASE("a servable refuses what it cannot serve, naming it") {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<Servable>> missing = Servable::Load(dir.Sub("nothing"));
  CHECK(absl::IsNotFound(missing.status()));

  REQUIRE(WriteExportedModel(dir.path(), TinyRecsysModel()).ok());
  absl::StatusOr<std::unique_ptr<Servable>> loaded = Servable::Load(dir.path());
  REQUIRE(loaded.ok());
  Batch out_of_range = TwoExamples();
  out_of_range.ids["user"] = {5, 0};  // 5 users: ids 0..4
  const absl::Status refused = (*loaded)->Predict(out_of_range).status();
  CHECK(absl::IsInvalidArgument(refused));
  Batch no_item = TwoExamples();
  no_item.ids.erase("item");
  CHECK(absl::IsInvalidArgument((*loaded)->Predict(no_item).status()));

  // A file cut short is refused when loaded, not served.
  const std::string file = dir.Sub("model.tsr");
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  const absl::Status truncated = Servable::Load(dir.path()).status();
  CHECK_FALSE(truncated.ok());
  CHECK_MESSAGE(absl::StrContains(truncated.message(), dir.path()), truncated.ToString());
}

}  // namespace
}  // namespace tessera
