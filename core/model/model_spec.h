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
// Every op but embedding lives in the op registry (core/model/op_registry.h), where a program adds
// its own; core/model/model_builder.h writes specs without computing a width by hand.
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
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/tensor.h"
#include "core/model/layers.h"
#include "core/model/losses.h"
#include "core/model/op_registry.h"
#include "core/variables/initializer.h"

namespace tessera {

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
    const OpDef* op = nullptr;  // the registry's op; null for an embedding node
    std::vector<int> inputs;    // value numbers
    std::vector<int> params;    // indices into spec.params
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

}  // namespace tessera
