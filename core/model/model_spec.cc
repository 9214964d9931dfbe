#include "tessera/model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessera/ops.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// The role an embedding node gives its table; registry ops name their own roles ("kernel",
// "bias", ...). One parameter keeps one role across all its nodes.
constexpr char kTableRole[] = "table";

absl::StatusOr<Combiner> ParseCombiner(const std::string& name) {
  if (name == "sum") return Combiner::kSum;
  if (name == "mean") return Combiner::kMean;
  if (name == "sqrtn") return Combiner::kSqrtN;
  return absl::InvalidArgumentError(
      absl::StrCat("combiner must be sum, mean or sqrtn, got '", name, "'"));
}

std::string Count(int n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// The resolver's state while it walks the spec; every error it makes names the node.
class Resolver {
 public:
  explicit Resolver(const ModelSpec& spec) : spec_(spec) {}

  absl::StatusOr<ResolvedGraph> Run() {
    TESSERA_RETURN_IF_ERROR(ResolveInputs());
    TESSERA_RETURN_IF_ERROR(ResolveParams());
    for (size_t n = 0; n < spec_.nodes.size(); ++n) {
      if (spec_.nodes[n].name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("node #", n, " has no name"));
      }
      future_nodes_.emplace(spec_.nodes[n].name, static_cast<int>(n));
    }
    for (size_t n = 0; n < spec_.nodes.size(); ++n) {
      TESSERA_RETURN_IF_ERROR(ResolveNode(static_cast<int>(n)));
    }
    for (size_t p = 0; p < spec_.params.size(); ++p) {
      if (roles_[p].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", spec_.params[p].name, "' is not used by any node"));
      }
      graph_.param_is_embedding.push_back(roles_[p] == kTableRole);
    }
    TESSERA_RETURN_IF_ERROR(ResolveOutputs());
    TESSERA_RETURN_IF_ERROR(ResolveLoss());
    return std::move(graph_);
  }

 private:
  absl::Status ResolveInputs() {
    graph_.num_inputs = static_cast<int>(spec_.inputs.size());
    for (size_t i = 0; i < spec_.inputs.size(); ++i) {
      const InputSpec& in = spec_.inputs[i];
      if (in.name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("input #", i, " has no name"));
      }
      if (in.kind != InputKind::kIds && in.kind != InputKind::kDense &&
          in.kind != InputKind::kIdList) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name, "': invalid kind ", static_cast<int>(in.kind)));
      }
      const bool ids = in.kind != InputKind::kDense;
      if (ids && in.width != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name, "': an ", InputKindName(in.kind),
                         " input feeds embeddings, so its width must be 1, got ", in.width));
      }
      if (in.hash_buckets < 0 || (!ids && in.hash_buckets != 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", in.name, "': hash_buckets must be 0 or, for an ids or id_list input, >= 1; ",
            "got ", in.hash_buckets));
      }
      if (in.width < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name, "': width must be >= 1, got ", in.width));
      }
      if (!values_.emplace(in.name, static_cast<int>(i)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name, "': the name is used twice"));
      }
      graph_.value_widths.push_back(in.width);
    }
    return absl::OkStatus();
  }

  absl::Status ResolveParams() {
    for (size_t p = 0; p < spec_.params.size(); ++p) {
      const ParamSpec& param = spec_.params[p];
      if (param.name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("parameter #", p, " has no name"));
      }
      if (!params_.emplace(param.name, static_cast<int>(p)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", param.name, "': the name is used twice"));
      }
      if (param.shape.rank() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", param.name, "': shape must have rank >= 1, got []"));
      }
      for (int64_t d : param.shape.dims()) {
        if (d < 1) {
          return absl::InvalidArgumentError(absl::StrCat("parameter '", param.name, "': shape ",
                                                         param.shape.ToString(),
                                                         " has a dimension < 1"));
        }
      }
      TESSERA_RETURN_IF_ERROR(Annotate(ValidateInitializer(param.initializer),
                                       absl::StrCat("parameter '", param.name, "'")));
    }
    roles_.assign(spec_.params.size(), std::string());
    return absl::OkStatus();
  }

  absl::Status NodeError(const NodeSpec& node, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name, "' (", node.op, "): ", message));
  }

  // The value number of `name` as input of node `n`.
  absl::StatusOr<int> ResolveEdge(int n, const std::string& name) const {
    const NodeSpec& node = spec_.nodes[n];
    auto it = values_.find(name);
    if (it != values_.end()) return it->second;
    auto later = future_nodes_.find(name);
    if (later != future_nodes_.end()) {
      if (later->second == n) return NodeError(node, "reads its own output (a cycle)");
      return NodeError(
          node, absl::StrCat("reads '", name, "' before its definition (node #", later->second,
                             "; nodes must be listed in "
                             "topological order, so a cycle cannot be)"));
    }
    return NodeError(node, absl::StrCat("reads '", name, "', which is no input or node"));
  }

  absl::StatusOr<int> ResolveParam(const NodeSpec& node, const std::string& name,
                                   const std::string& role) {
    auto it = params_.find(name);
    if (it == params_.end()) {
      return NodeError(node, absl::StrCat("unknown parameter '", name, "'"));
    }
    std::string& current = roles_[it->second];
    if (!current.empty() && current != role) {
      return NodeError(node, absl::StrCat("uses parameter '", name, "' as its ", role,
                                          " but another node uses it as its ", current));
    }
    current = role;
    return it->second;
  }

  absl::Status CheckAttrs(const NodeSpec& node, const std::vector<std::string>& numeric,
                          const std::vector<std::string>& strings) const {
    for (const auto& [name, value] : node.attrs) {
      if (std::find(numeric.begin(), numeric.end(), name) == numeric.end()) {
        return NodeError(node, absl::StrCat("unknown attribute '", name, "'"));
      }
    }
    for (const auto& [name, value] : node.string_attrs) {
      if (std::find(strings.begin(), strings.end(), name) == strings.end()) {
        return NodeError(node, absl::StrCat("unknown string attribute '", name, "'"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ResolveNode(int n) {
    const NodeSpec& node = spec_.nodes[n];
    if (values_.count(node.name) != 0) {
      return NodeError(node, "the name is already used by an input or an earlier node");
    }
    ResolvedGraph::Node out;
    const OpDef* op = nullptr;
    if (node.op != kOpEmbedding) {
      op = FindOp(node.op);
      if (op == nullptr) {
        return NodeError(node, absl::StrCat("unknown op (registered: embedding, ",
                                            absl::StrJoin(RegisteredOpNames(), ", "), ")"));
      }
    }
    out.op = op;
    const int min_inputs = op == nullptr ? 1 : op->min_inputs;
    const int max_inputs = op == nullptr ? 1 : op->max_inputs;
    const int num_inputs = static_cast<int>(node.inputs.size());
    if (num_inputs < min_inputs || (max_inputs >= 0 && num_inputs > max_inputs)) {
      return NodeError(
          node, absl::StrCat("has ", Count(num_inputs, "input"), ", expected ",
                             max_inputs < 0            ? absl::StrCat("at least ", min_inputs)
                             : min_inputs == max_inputs ? absl::StrCat(min_inputs)
                                                        : absl::StrCat(min_inputs, " to ",
                                                                       max_inputs)));
    }
    int min_params = 1;
    int max_params = 1;
    if (op != nullptr) {
      max_params = static_cast<int>(op->params.size());
      min_params = 0;
      for (const OpParamDef& param : op->params) min_params += param.optional ? 0 : 1;
    }
    const int num_params = static_cast<int>(node.params.size());
    if (num_params < min_params || num_params > max_params) {
      return NodeError(node,
                       absl::StrCat("has ", Count(num_params, "parameter"), ", expected ",
                                    min_params == max_params
                                        ? absl::StrCat(min_params)
                                        : absl::StrCat(min_params, " to ", max_params)));
    }
    for (const std::string& input : node.inputs) {
      TESSERA_ASSIGN_OR_RETURN(const int v, ResolveEdge(n, input));
      const bool is_ids = v < graph_.num_inputs && spec_.inputs[v].kind != InputKind::kDense;
      if (is_ids && op != nullptr) {
        return NodeError(node, absl::StrCat("reads ", InputKindName(spec_.inputs[v].kind),
                                            " input '", input,
                                            "'; only an embedding can read ids"));
      }
      if (!is_ids && op == nullptr) {
        return NodeError(node,
                         absl::StrCat("reads '", input, "', which is not an ids or id_list input"));
      }
      out.inputs.push_back(v);
    }
    if (op == nullptr) {
      TESSERA_RETURN_IF_ERROR(ResolveEmbedding(node, out));
    } else {
      TESSERA_RETURN_IF_ERROR(CheckAttrs(node, op->number_attrs, op->string_attrs));
      OpShapeArgs args;
      for (int v : out.inputs) args.input_widths.push_back(graph_.value_widths[v]);
      args.num_params = num_params;
      args.attrs = {&node.attrs, &node.string_attrs};
      absl::StatusOr<OpShape> shape = op->infer(args);
      if (!shape.ok()) return NodeError(node, shape.status().message());
      if (shape->width < 1 || shape->param_shapes.size() != node.params.size()) {
        return NodeError(node, absl::StrCat("the op's shape rule gave width ", shape->width,
                                            " and ", shape->param_shapes.size(),
                                            " parameter shapes for ", num_params, " parameters"));
      }
      out.width = shape->width;
      for (int j = 0; j < num_params; ++j) {
        const std::string& role = op->params[j].role;
        TESSERA_ASSIGN_OR_RETURN(const int p, ResolveParam(node, node.params[j], role));
        if (spec_.params[p].shape != shape->param_shapes[j]) {
          std::vector<std::string> widths;
          for (int64_t w : args.input_widths) widths.push_back(absl::StrCat(w));
          return NodeError(node, absl::StrCat(role, " '", node.params[j], "' has shape ",
                                              spec_.params[p].shape.ToString(), ", expected ",
                                              shape->param_shapes[j].ToString(),
                                              " (input widths ", absl::StrJoin(widths, ", "),
                                              ")"));
        }
        out.params.push_back(p);
      }
    }
    values_.emplace(node.name, graph_.num_inputs + n);
    graph_.value_widths.push_back(out.width);
    graph_.nodes.push_back(std::move(out));
    return absl::OkStatus();
  }

  absl::Status ResolveEmbedding(const NodeSpec& node, ResolvedGraph::Node& out) {
    TESSERA_RETURN_IF_ERROR(CheckAttrs(node, {}, {"combiner"}));
    auto combiner = node.string_attrs.find("combiner");
    if (combiner != node.string_attrs.end()) {
      absl::StatusOr<Combiner> parsed = ParseCombiner(combiner->second);
      if (!parsed.ok()) return NodeError(node, parsed.status().message());
      out.combiner = *parsed;
    }
    TESSERA_ASSIGN_OR_RETURN(const int p, ResolveParam(node, node.params[0], kTableRole));
    const Shape& shape = spec_.params[p].shape;
    if (shape.rank() != 2) {
      return NodeError(node, absl::StrCat("embedding table '", node.params[0],
                                          "' must be [rows, dim], got shape ", shape.ToString()));
    }
    const InputSpec& input = spec_.inputs[out.inputs[0]];
    if (input.hash_buckets > 0 && shape.dim(0) != input.hash_buckets) {
      return NodeError(node, absl::StrCat("input '", input.name, "' is hashed into ",
                                          input.hash_buckets, " buckets but table '",
                                          node.params[0], "' has ", shape.dim(0),
                                          " rows: they must be equal"));
    }
    out.params.push_back(p);
    out.width = shape.dim(1);
    return absl::OkStatus();
  }

  // The value number of node `name`, for outputs and the loss.
  absl::StatusOr<int> FindNode(const std::string& name, absl::string_view what) const {
    auto it = values_.find(name);
    if (it == values_.end() || it->second < graph_.num_inputs) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", name, "' is not a node"));
    }
    return it->second;
  }

  absl::Status ResolveOutputs() {
    for (const auto& [name, node] : spec_.outputs) {
      if (name.empty()) return absl::InvalidArgumentError("an output has no name");
      TESSERA_ASSIGN_OR_RETURN(const int v, FindNode(node, absl::StrCat("output '", name, "'")));
      graph_.output_values.emplace(name, v);
    }
    return absl::OkStatus();
  }

  absl::Status ResolveLoss() {
    auto kind = ParseLoss(spec_.loss.kind);
    if (!kind.ok()) return Annotate(kind.status(), "loss");
    graph_.loss = *kind;
    TESSERA_ASSIGN_OR_RETURN(graph_.loss_value, FindNode(spec_.loss.logits, "loss logits"));
    const int64_t width = graph_.value_widths[graph_.loss_value];
    if (graph_.loss != LossKind::kSoftmaxCrossEntropy && width != 1) {
      return absl::InvalidArgumentError(absl::StrCat("loss ", LossName(graph_.loss),
                                                     ": logits node '", spec_.loss.logits,
                                                     "' is ", width,
                                                     " wide, expected 1 (labels are [B, 1])"));
    }
    return absl::OkStatus();
  }

  const ModelSpec& spec_;
  ResolvedGraph graph_;
  std::map<std::string, int> values_;        // inputs and nodes defined so far
  std::map<std::string, int> future_nodes_;  // every node name -> its index
  std::map<std::string, int> params_;
  std::vector<std::string> roles_;  // per parameter; empty: unused so far
};

}  // namespace

absl::string_view InputKindName(InputKind kind) {
  switch (kind) {
    case InputKind::kIds:
      return "ids";
    case InputKind::kDense:
      return "dense";
    case InputKind::kIdList:
      return "id_list";
  }
  return "invalid";
}

bool operator==(const InputSpec& a, const InputSpec& b) {
  return a.name == b.name && a.kind == b.kind && a.width == b.width &&
         a.hash_buckets == b.hash_buckets;
}

bool operator==(const ParamSpec& a, const ParamSpec& b) {
  return a.name == b.name && a.shape == b.shape && a.initializer.name == b.initializer.name &&
         a.initializer.params == b.initializer.params && a.initializer.seed == b.initializer.seed &&
         a.trainable == b.trainable && a.partitioned == b.partitioned;
}

bool operator==(const NodeSpec& a, const NodeSpec& b) {
  return a.name == b.name && a.op == b.op && a.inputs == b.inputs && a.params == b.params &&
         a.attrs == b.attrs && a.string_attrs == b.string_attrs;
}

bool operator==(const LossSpec& a, const LossSpec& b) {
  return a.kind == b.kind && a.logits == b.logits;
}

bool operator==(const ModelSpec& a, const ModelSpec& b) {
  return a.name == b.name && a.inputs == b.inputs && a.params == b.params && a.nodes == b.nodes &&
         a.outputs == b.outputs && a.loss == b.loss;
}

absl::StatusOr<ResolvedGraph> ResolveModelSpec(const ModelSpec& spec) {
  return Resolver(spec).Run();
}

}  // namespace tessera
