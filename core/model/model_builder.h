// ModelBuilder: writes a ModelSpec (core/model/model_spec.h) in C++ with shape inference — a user
// states inputs, tables and layers, and never computes a width or names a parameter by hand. The
// result is the same declarative spec an exported model carries, so a model built here still
// serves without the program that built it.
//
// Example, a DLRM (examples/dlrm.cc has the whole program):
//   ModelBuilder b("dlrm", /*seed=*/1);
//   ModelBuilder::Value x = b.Log1p(b.DenseInput("dense", 13));
//   x = b.Dense(b.Dense(x, 64, "relu"), 16, "relu");               // the bottom MLP
//   std::vector<ModelBuilder::Value> z = {x};
//   for (int i = 1; i <= 26; ++i) {
//     const std::string c = absl::StrCat("C", i);
//     z.push_back(b.Embedding(b.IdInput(c, /*hash_buckets=*/100000),
//                             b.EmbeddingTable(c + "_table", 100000, 16)));
//   }
//   ModelBuilder::Value top = b.Dense(b.Dense(b.DotInteraction(z), 128, "relu"), 64, "relu");
//   ModelBuilder::Value logits = b.Dense(top, 1, "linear", "logits");
//   b.Output("logits", logits);
//   b.Output("probability", b.Sigmoid(logits, "probability"));
//   b.Loss("sigmoid_cross_entropy", logits);
//   TESSERA_ASSIGN_OR_RETURN(ModelSpec spec, b.Build());
//
// Names: a node is named by its caller or, by default, "<op>_<k>" (dense_1, dense_2, ...); its
// parameters are "<node>/<role>" ("dense_1/kernel", "dense_1/bias"). Initializers: tables
// random_uniform(-0.05, 0.05) (Keras' embeddings), parameters of rank 2 glorot_uniform, of rank
// 1 zeros; each seeded by DeriveParamSeed(seed, its position), so one seed reproduces the model.
// Tables are partitioned across parameter servers; other parameters are not.
//
// Errors: the first mistake (a width mismatch, a Value of another builder, a duplicate name, an
// op's shape rule refusing its inputs) is kept, later calls return placeholder Values, and
// Build returns it naming the node; Build then checks the whole spec with ResolveModelSpec, so a
// spec it returns always resolves.
//
// Thread-safety: a builder is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model_spec.h"

namespace tessera {

class ModelBuilder {
 public:
  // A value of the graph (an input or a node's output): a handle into its builder.
  struct Value {
    int id = -1;
    const ModelBuilder* owner = nullptr;
  };
  // An embedding table, which several lookups may share.
  struct Table {
    int param = -1;
    const ModelBuilder* owner = nullptr;
  };

  explicit ModelBuilder(std::string name, uint64_t seed = 0);

  // Inputs. hash_buckets (ids inputs): 0 for ids that are table rows; N for raw ids (integers or
  // StringIds) hashed into a table of N rows.
  Value DenseInput(const std::string& name, int64_t width);
  Value IdInput(const std::string& name, int64_t hash_buckets = 0);
  Value IdListInput(const std::string& name, int64_t hash_buckets = 0);

  Table EmbeddingTable(const std::string& name, int64_t rows, int64_t dim);
  // The rows of `ids` in `table`, combined per example ("sum", "mean", "sqrtn"; "" leaves the
  // spec's default, mean, unstated).
  Value Embedding(Value ids, Table table, const std::string& combiner = "",
                  const std::string& name = "");

  Value Dense(Value x, int64_t units, const std::string& activation = "linear",
              const std::string& name = "", bool bias = true);
  Value Relu(Value x, const std::string& name = "");
  Value Sigmoid(Value x, const std::string& name = "");
  Value Tanh(Value x, const std::string& name = "");
  Value Softmax(Value x, const std::string& name = "");
  Value Log1p(Value x, const std::string& name = "");
  Value Concat(const std::vector<Value>& xs, const std::string& name = "");
  Value Add(const std::vector<Value>& xs, const std::string& name = "");
  Value Multiply(const std::vector<Value>& xs, const std::string& name = "");
  Value Dot(Value a, Value b, const std::string& name = "");
  Value DotInteraction(const std::vector<Value>& zs, const std::string& name = "");
  Value Cross(Value x0, Value xl, const std::string& name = "");
  // Any registered op (core/model/op_registry.h), a program's own included: its shape rule gives
  // the width and its parameters' shapes; `num_params` of its parameters are created (-1: all).
  Value Op(const std::string& op, const std::vector<Value>& inputs,
           const std::map<std::string, double>& attrs = {},
           const std::map<std::string, std::string>& string_attrs = {},
           const std::string& name = "", int num_params = -1);

  // The width of a value (0 for a placeholder after an error).
  int64_t Width(Value v) const;

  void Output(const std::string& name, Value v);
  // "sigmoid_cross_entropy", "softmax_cross_entropy" or "mean_squared_error" on `logits`.
  void Loss(const std::string& kind, Value logits);

  // The spec, or the first error (see above).
  absl::StatusOr<ModelSpec> Build() const;

 private:
  bool Check(Value v, const std::string& what);
  std::string NodeName(const std::string& given, const std::string& op);
  int AddParam(std::string name, Shape shape, std::string initializer, bool partitioned);
  Value AddValue(const std::string& name, int64_t width);
  void Fail(absl::Status status);

  ModelSpec spec_;
  uint64_t seed_;
  std::vector<std::string> value_names_;  // by Value::id
  std::vector<int64_t> value_widths_;
  std::map<std::string, int> op_counts_;
  absl::Status error_;
};

}  // namespace tessera
