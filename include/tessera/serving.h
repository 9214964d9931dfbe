// Serving a trained model without the training code: a Servable is one exported model version
// (the directory a run's --export_dir names, TF's SavedModel) loaded to answer predictions in a
// program of one's own. `tessera serve` answers TensorFlow Serving's REST API from the same
// exports (README, "Serve a trained model").
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Servable> model, Servable::Load("/models/recsys/1"));
//   Batch batch;                                 // the features the model's inputs name
//   batch.size = 1;
//   batch.ids["user"] = {42};
//   batch.ids["item"] = {7};
//   TESSERA_ASSIGN_OR_RETURN(auto outputs, model->Predict(batch));
//   float probability = outputs.at("probability").data()[0];
//
// Thread-safety: a Servable is immutable once loaded; Predict may be called from many threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tessera/data.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera {

class Predictor;  // the runtime behind a Servable (the library's)

class Servable {
 public:
  // Opens `dir`/model.tsr, mapped (the embedding tables are read row by row as predictions look
  // them up, their checksums verified then; every other variable is verified now). NotFound
  // without a model there; DataLoss or InvalidArgument, naming the directory, for a truncated,
  // forged or inconsistent file.
  static absl::StatusOr<std::unique_ptr<Servable>> Load(const std::string& dir);
  ~Servable();
  Servable(const Servable&) = delete;
  Servable& operator=(const Servable&) = delete;

  // The model as its training program built it.
  const ModelSpec& spec() const;
  // The global step it was exported at, and the Tessera version that wrote it ("" for a file
  // written before versions were recorded).
  int64_t step() const;
  const std::string& writer_version() const;

  // The outputs of `batch` (labels are not needed), by output name, each [batch.size, width].
  // InvalidArgument for a missing or mis-shaped feature, an id out of range, or an output that
  // is not finite (naming the output and the example); DataLoss when a row the batch looks up is
  // unsound in the file.
  absl::StatusOr<std::map<std::string, Tensor>> Predict(const Batch& batch) const;

 private:
  explicit Servable(std::unique_ptr<Predictor> predictor);
  std::unique_ptr<Predictor> predictor_;
};

}  // namespace tessera
