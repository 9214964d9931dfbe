// ModelSpec: the declarative description of a model — its named inputs, parameters, layer nodes,
// outputs and loss — as plain data (strings, numbers, vectors, maps), so that an exported model
// can store it and rebuild the Model without the driver's code. core/model.h runs it.
//
// A graph is a list of nodes in definition order. Every node produces one value, a [B, width]
// matrix (B examples); it reads values named by `inputs` (model inputs or EARLIER nodes) and
// parameters named by `params`. Ops, their inputs, parameters and attributes:
//
//   op          inputs               params                    attrs
//   embedding   one ids input        table [rows, dim]         -
//   dense       one value [B, in]    kernel [in, units],       units (number, required),
//                                    optional bias [units]     activation (string, "linear")
//   relu, sigmoid, tanh, softmax
//               one value            -                         -
//   concat      one or more values   -                         -
//
// A parameter used by an embedding node is an *embedding parameter*: a step reads only the rows
// its batch looks up, and its gradient is sparse (IndexedSlices). Every other parameter is read
// whole and has a dense gradient. A parameter may be shared by several nodes of one role.
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
#include "core/initializer.h"
#include "core/layers.h"
#include "core/losses.h"
#include "core/tensor.h"

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
absl::StatusOr<InputKind> ParseInputKind(absl::string_view name);

struct InputSpec {
  std::string name;  // the Batch feature's name
  InputKind kind = InputKind::kDense;
  int64_t width = 1;  // dense: values per example (>= 1); ids and id_list: must be 1
  // ids and id_list only. 0: the ids are table rows, checked against the table's size. N >= 1:
  // the ids are raw values (integer ids, or StringId of strings: core/hash.h), each looked up
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
  std::string kind;    // "sigmoid_cross_entropy" (logits [B, 1]) or "softmax_cross_entropy"
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

enum class OpKind { kEmbedding, kDense, kRelu, kSigmoid, kTanh, kSoftmax, kConcat };

// The validated, index-resolved form of a ModelSpec that core/model.h runs.
// Values are numbered inputs first, then nodes: value v < num_inputs is spec.inputs[v], value
// num_inputs + n is spec.nodes[n]'s output.
struct ResolvedGraph {
  struct Node {
    OpKind op = OpKind::kRelu;
    std::vector<int> inputs;                      // value numbers
    std::vector<int> params;                      // indices into spec.params
    Activation activation = Activation::kLinear;  // dense only
    int64_t width = 0;                            // columns of the node's [B, width] output
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
// one namespace, parameters another); an input's width is < 1 (or an ids input's is not 1); a
// parameter's shape has a dimension < 1 or its initializer is invalid; a node's op is unknown,
// it has the wrong number of inputs or parameters, or an attribute the op does not take; an edge
// names no input or node ("dangling"), or a node defined later (use before definition, which
// is also how a cycle shows); an embedding reads something other than an ids input, or an ids
// input feeds anything else; a parameter is unknown, unused, or used in two roles; shapes do not
// chain (a dense kernel's rows differ from its input's width, its columns from units, a bias is
// not [units], an embedding table is not rank 2); an output names no node; the loss kind is
// unknown, its logits node does not exist, or sigmoid_cross_entropy's logits are not 1 wide.
absl::StatusOr<ResolvedGraph> ResolveModelSpec(const ModelSpec& spec);

}  // namespace tessera
