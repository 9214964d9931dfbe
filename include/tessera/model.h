// A model as data: how its parameters are initialized, the ModelSpec that describes it (inputs,
// parameters, nodes, outputs, loss), and the ModelBuilder that writes a spec with shape
// inference. An exported model carries this spec, so it serves without the program that built it.
// Three parts below: initializers, the spec, the builder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessera/ops.h"
#include "tessera/tensor.h"

namespace tessera {

// Initializers: fill one row block of a variable from (full shape, row offset, block shape)
// without ever building the full value.
//
// Values depend only on (seed, global element position): a variable initialized as one block and
// the same variable initialized as 2, 3 or 7 shards are identical element for element
// (docs/design.md §3, better than TF). The randomness is Philox (core/base/random.h), keyed by the
// seed and counted by the element's global flat index.
//
// Thread-safety: pure functions.

// Names an initializer and its parameters; serializable (model graphs and shard placement
// messages carry it, so a PS node can initialize a shard from it).
//
//   name               params (defaults)
//   zeros, ones        -
//   constant           value (0)
//   random_uniform     minval (-0.05), maxval (0.05)          Keras' defaults
//   random_normal      mean (0), stddev (0.05)
//   truncated_normal   mean (0), stddev (0.05)                resampled beyond 2 stddev
//   glorot_uniform     -                                      limit sqrt(6 / (fan_in + fan_out))
struct InitializerSpec {
  std::string name;
  std::map<std::string, double> params;
  uint64_t seed = 0;
};

// InvalidArgument for an unknown name, an unknown parameter or an invalid value (maxval <=
// minval, stddev < 0).
absl::Status ValidateInitializer(const InitializerSpec& spec);

// The initializer seed of parameter number `index` of a model seeded `model_seed`: 64 Philox
// bits of (model_seed, index), so distinct parameters get unrelated streams. Part of what a
// model seed means: never change it.
uint64_t DeriveParamSeed(uint64_t model_seed, int64_t index);

// Fills `block`, the rows [row_offset, row_offset + block.rows()) of a variable of `full_shape`.
// InvalidArgument when the spec is invalid, or the block's trailing dims differ from
// full_shape's, or the rows fall outside full_shape.
absl::Status InitializeBlock(const InitializerSpec& spec, const Shape& full_shape,
                             int64_t row_offset, TensorView block);

// Convenience: a new tensor holding rows [row_offset, row_offset + rows) of the variable.
absl::StatusOr<Tensor> MakeInitializedBlock(const InitializerSpec& spec, const Shape& full_shape,
                                            int64_t row_offset, int64_t rows);

// ModelSpec: the declarative description of a model — its named inputs, parameters, layer nodes,
// outputs and loss — as plain data (strings, numbers, vectors, maps), so that an exported model
// can store it and rebuild the Model without the driver's code. core/model/model.h runs it.
//
// A graph is a list of nodes in definition order. Every node produces one value, a [B, width]
// matrix (B examples); it reads values named by `inputs` (model inputs or EARLIER nodes) and
// parameters named by `params`. The ops, their inputs, parameters and attributes:
//
//   op          inputs                 params                  attrs
//   embedding   one ids or id_list     table [rows, dim]       combiner ("sum", "mean" (default),
//               input                                          "sqrtn"): an example's row is the
//                                                              weighted sum / mean / sum over the
//                                                              root of the sum of squared weights
//                                                              of its ids' rows (an empty list:
//                                                              zeros); hashed inputs
//                                                              (InputSpec::hash_buckets = N) need
//                                                              a table of N rows
//   dense       one value [B, in]      kernel [in, units],     units (required), activation
//                                      optional bias [units]   ("linear", "relu", "sigmoid",
//                                                              "tanh")
//   relu, sigmoid, tanh, softmax, log1p
//               one value              -                       - (log1p is log(1 + max(x, 0)),
//                                                              the transform of count features)
//   concat      one or more values     -                       -
//   add, multiply
//               two or more values of one width (elementwise)
//   dot         two values of one width -> [B, 1] (row-wise dot product: a two-tower's logits)
//   dot_interaction
//               z_0, ..., z_{n-1} of one width d -> [B, d + n(n-1)/2]: z_0 followed by every
//               <z_i, z_j>, i < j, in the order (0,1), (0,2), ..., (1,2), ... (DLRM); attr
//               self_interaction 1 also includes i == j
//   cross       x0, xl of one width d  kernel [d, d], bias [d]   - (DCN: x0 * (xl W + b) + xl)
//
// Every op but embedding lives in the op registry (tessera/ops.h), where a program adds
// its own; tessera/model.h writes specs without computing a width by hand.
//
// A parameter used by an embedding node is an *embedding parameter*: a step reads only the rows
// its batch looks up, and its gradient is sparse (IndexedSlices). Every other parameter is read
// whole and has a dense gradient. A parameter may be shared by several nodes of one role
// (several features looking up one table).
//
// Example (logistic regression on a dense feature "x" of 3 values):
//   ModelSpec spec;
//   spec.inputs = {{"x", InputKind::kDense, 3}};
//   spec.params = {{"w", Shape{3, 1}, {"glorot_uniform", {}, 7}},
//                  {"b", Shape{1}, {"zeros", {}, 0}}};
//   spec.nodes = {{"logits", "dense", {"x"}, {"w", "b"}, {{"units", 1}}, {}}};
//   spec.outputs = {{"logits", "logits"}};
//   spec.loss = {"sigmoid_cross_entropy", "logits"};
//
// Thread-safety: plain values.

// Op names (NodeSpec::op).
inline constexpr char kOpEmbedding[] = "embedding";
inline constexpr char kOpDense[] = "dense";
inline constexpr char kOpRelu[] = "relu";
inline constexpr char kOpSigmoid[] = "sigmoid";
inline constexpr char kOpTanh[] = "tanh";
inline constexpr char kOpSoftmax[] = "softmax";
inline constexpr char kOpConcat[] = "concat";

enum class InputKind : int {
  kIds = 1,     // Batch::ids[name]: one int64 id per example; feeds embedding nodes only
  kDense = 2,   // Batch::dense[name]: [B, width] floats
  kIdList = 3,  // Batch::id_lists[name]: any number of (weighted) ids per example; embeddings
};
absl::string_view InputKindName(InputKind kind);  // "ids", "dense" or "id_list"

struct InputSpec {
  std::string name;  // the Batch feature's name
  InputKind kind = InputKind::kDense;
  int64_t width = 1;  // dense: values per example (>= 1); ids and id_list: must be 1
  // ids and id_list only. 0: the ids are table rows, checked against the table's size. N >= 1:
  // the ids are raw values (integer ids, or StringId of strings: core/base/hash.h), each looked up
  // at row HashBucket(id, N) of a table of N rows.
  int64_t hash_buckets = 0;
};

struct ParamSpec {
  std::string name;
  Shape shape;
  InitializerSpec initializer;
  bool trainable = true;
  // A hint for the strategy: shard this variable across parameter servers (embedding tables
  // yes, small dense layers no).
  bool partitioned = false;
};

struct NodeSpec {
  std::string name;                     // the value it produces; unique among inputs and nodes
  std::string op;                       // one of the kOp* names
  std::vector<std::string> inputs;      // model inputs or earlier nodes
  std::vector<std::string> params;      // parameter names, in the op's order (see the table above)
  std::map<std::string, double> attrs;  // numeric attributes ("units")
  std::map<std::string, std::string> string_attrs;  // string attributes ("activation")
};

struct LossSpec {
  // "sigmoid_cross_entropy" (logits [B, 1]), "softmax_cross_entropy" or "mean_squared_error"
  // (predictions [B, 1] against real-valued labels).
  std::string kind;
  std::string logits;  // the node holding the logits
};

struct ModelSpec {
  std::string name;
  std::vector<InputSpec> inputs;
  std::vector<ParamSpec> params;
  std::vector<NodeSpec> nodes;                 // in definition (topological) order
  std::map<std::string, std::string> outputs;  // output name -> node name
  LossSpec loss;
};

bool operator==(const InputSpec& a, const InputSpec& b);
bool operator==(const ParamSpec& a, const ParamSpec& b);
bool operator==(const NodeSpec& a, const NodeSpec& b);
bool operator==(const LossSpec& a, const LossSpec& b);
bool operator==(const ModelSpec& a, const ModelSpec& b);
inline bool operator!=(const ModelSpec& a, const ModelSpec& b) { return !(a == b); }

// How an embedding node combines the rows of an example's ids.
enum class Combiner { kSum, kMean, kSqrtN };

struct OpDef;

// The validated, index-resolved form of a ModelSpec that core/model/model.h runs.
// Values are numbered inputs first, then nodes: value v < num_inputs is spec.inputs[v], value
// num_inputs + n is spec.nodes[n]'s output.
struct ResolvedGraph {
  struct Node {
    const OpDef* op = nullptr;            // the registry's op; null for an embedding node
    std::vector<int> inputs;              // value numbers
    std::vector<int> params;              // indices into spec.params
    Combiner combiner = Combiner::kMean;  // embedding only
    int64_t width = 0;                    // columns of the node's [B, width] output

    bool is_embedding() const { return op == nullptr; }
  };
  int num_inputs = 0;
  std::vector<int64_t> value_widths;  // per value (ids inputs: 1)
  std::vector<Node> nodes;
  std::vector<bool> param_is_embedding;      // per spec.params entry
  std::map<std::string, int> output_values;  // output name -> value number
  LossKind loss = LossKind::kSigmoidCrossEntropy;
  int loss_value = 0;  // the logits' value number
};

// Validates `spec` and resolves its names to indices. InvalidArgument, naming the offending
// input, parameter, node or output, when: a name is empty or duplicated (inputs and nodes share
// one namespace, parameters another); an input's width is < 1 (or an ids / id_list input's is not
// 1), or hash_buckets is negative or set on a dense input; a parameter's shape has a dimension
// < 1 or its initializer is invalid; a node's op is unknown, it has the wrong number of inputs or
// parameters, or an attribute the op does not take; an edge names no input or node
// ("dangling"), or a node defined later (use before definition, which is also how a cycle
// shows); an embedding reads something other than an ids or id_list input, or such an input
// feeds anything else; a parameter is unknown, unused, or used in two roles; shapes do not chain
// (the op's shape rule refuses its inputs, or a parameter's shape is not the one the rule gives;
// an embedding table is not rank 2 or, for a hashed input, not hash_buckets rows); an output
// names no node; the loss kind is unknown, its logits node does not exist, or a
// sigmoid_cross_entropy or mean_squared_error logits node is not 1 wide.
absl::StatusOr<ResolvedGraph> ResolveModelSpec(const ModelSpec& spec);

// ModelBuilder: writes a ModelSpec (tessera/model.h) in C++ with shape inference — a user
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
  // Any registered op (tessera/ops.h), a program's own included: its shape rule gives
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
