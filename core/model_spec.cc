#include "core/model_spec.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace tessera {
namespace {

// How a node uses a parameter; one parameter keeps one role across all its nodes.
enum class ParamRole { kUnused, kTable, kKernel, kBias };

absl::string_view RoleName(ParamRole role) {
  switch (role) {
    case ParamRole::kUnused:
      return "unused";
    case ParamRole::kTable:
      return "an embedding table";
    case ParamRole::kKernel:
      return "a dense kernel";
    case ParamRole::kBias:
      return "a dense bias";
  }
  return "invalid";
}

struct OpInfo {
  const char* name;
  OpKind kind;
  int min_inputs;
  int max_inputs;  // -1: unbounded
  int min_params;
  int max_params;
};

constexpr OpInfo kOps[] = {
    {kOpEmbedding, OpKind::kEmbedding, 1, 1, 1, 1}, {kOpDense, OpKind::kDense, 1, 1, 1, 2},
    {kOpRelu, OpKind::kRelu, 1, 1, 0, 0},           {kOpSigmoid, OpKind::kSigmoid, 1, 1, 0, 0},
    {kOpTanh, OpKind::kTanh, 1, 1, 0, 0},           {kOpSoftmax, OpKind::kSoftmax, 1, 1, 0, 0},
    {kOpConcat, OpKind::kConcat, 1, -1, 0, 0},
};

const OpInfo* FindOp(absl::string_view name) {
  for (const OpInfo& op : kOps) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

std::string Count(int n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// The resolver's state while it walks the spec; every error it makes names the node.
class Resolver {
 public:
  explicit Resolver(const ModelSpec& spec) : spec_(spec) {}

  absl::StatusOr<ResolvedGraph> Run() {
    RETURN_IF_ERROR(ResolveInputs());
    RETURN_IF_ERROR(ResolveParams());
    for (size_t n = 0; n < spec_.nodes.size(); ++n) {
      if (spec_.nodes[n].name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("node #", n, " has no name"));
      }
      future_nodes_.emplace(spec_.nodes[n].name, static_cast<int>(n));
    }
    for (size_t n = 0; n < spec_.nodes.size(); ++n) {
      RETURN_IF_ERROR(ResolveNode(static_cast<int>(n)));
    }
    for (size_t p = 0; p < spec_.params.size(); ++p) {
      if (roles_[p] == ParamRole::kUnused) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", spec_.params[p].name, "' is not used by any node"));
      }
      graph_.param_is_embedding.push_back(roles_[p] == ParamRole::kTable);
    }
    RETURN_IF_ERROR(ResolveOutputs());
    RETURN_IF_ERROR(ResolveLoss());
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
      if (in.kind != InputKind::kIds && in.kind != InputKind::kDense) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name, "': invalid kind ", static_cast<int>(in.kind)));
      }
      if (in.kind == InputKind::kIds && in.width != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name,
                         "': an ids input has one id per example, so its width must be "
                         "1, got ",
                         in.width));
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
      RETURN_IF_ERROR(Annotate(ValidateInitializer(param.initializer),
                               absl::StrCat("parameter '", param.name, "'")));
    }
    roles_.assign(spec_.params.size(), ParamRole::kUnused);
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

  absl::StatusOr<int> ResolveParam(const NodeSpec& node, const std::string& name, ParamRole role) {
    auto it = params_.find(name);
    if (it == params_.end()) {
      return NodeError(node, absl::StrCat("unknown parameter '", name, "'"));
    }
    ParamRole& current = roles_[it->second];
    if (current != ParamRole::kUnused && current != role) {
      return NodeError(node, absl::StrCat("uses parameter '", name, "' as ", RoleName(role),
                                          " but another node uses it as ", RoleName(current)));
    }
    current = role;
    return it->second;
  }

  absl::Status CheckAttrs(const NodeSpec& node, const std::set<std::string>& numeric,
                          const std::set<std::string>& strings) const {
    for (const auto& [name, value] : node.attrs) {
      if (numeric.count(name) == 0) {
        return NodeError(node, absl::StrCat("unknown attribute '", name, "'"));
      }
    }
    for (const auto& [name, value] : node.string_attrs) {
      if (strings.count(name) == 0) {
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
    const OpInfo* op = FindOp(node.op);
    if (op == nullptr) {
      std::vector<std::string> names;
      for (const OpInfo& o : kOps) names.push_back(o.name);
      return NodeError(
          node, absl::StrCat("unknown op (expected one of ", absl::StrJoin(names, ", "), ")"));
    }
    const int num_inputs = static_cast<int>(node.inputs.size());
    if (num_inputs < op->min_inputs || (op->max_inputs >= 0 && num_inputs > op->max_inputs)) {
      return NodeError(node, absl::StrCat("has ", Count(num_inputs, "input"), ", expected ",
                                          op->max_inputs < 0 ? "at least " : "", op->min_inputs));
    }
    const int num_params = static_cast<int>(node.params.size());
    if (num_params < op->min_params || num_params > op->max_params) {
      return NodeError(node,
                       absl::StrCat("has ", Count(num_params, "parameter"), ", expected ",
                                    op->min_params == op->max_params
                                        ? absl::StrCat(op->min_params)
                                        : absl::StrCat(op->min_params, " or ", op->max_params)));
    }
    ResolvedGraph::Node out;
    out.op = op->kind;
    for (const std::string& input : node.inputs) {
      ASSIGN_OR_RETURN(const int v, ResolveEdge(n, input));
      const bool is_ids = v < graph_.num_inputs && spec_.inputs[v].kind == InputKind::kIds;
      if (is_ids && op->kind != OpKind::kEmbedding) {
        return NodeError(
            node, absl::StrCat("reads ids input '", input, "'; only an embedding can read ids"));
      }
      if (!is_ids && op->kind == OpKind::kEmbedding) {
        return NodeError(node, absl::StrCat("reads '", input, "', which is not an ids input"));
      }
      out.inputs.push_back(v);
    }
    const int64_t in_width = graph_.value_widths[out.inputs[0]];
    switch (op->kind) {
      case OpKind::kEmbedding: {
        RETURN_IF_ERROR(CheckAttrs(node, {}, {}));
        ASSIGN_OR_RETURN(const int p, ResolveParam(node, node.params[0], ParamRole::kTable));
        const Shape& shape = spec_.params[p].shape;
        if (shape.rank() != 2) {
          return NodeError(node,
                           absl::StrCat("embedding table '", node.params[0],
                                        "' must be [rows, dim], got shape ", shape.ToString()));
        }
        out.params.push_back(p);
        out.width = shape.dim(1);
        break;
      }
      case OpKind::kDense: {
        RETURN_IF_ERROR(CheckAttrs(node, {"units"}, {"activation"}));
        auto units_it = node.attrs.find("units");
        if (units_it == node.attrs.end()) return NodeError(node, "missing attribute 'units'");
        const double units = units_it->second;
        if (!(units >= 1 && units <= 1e12) || units != std::floor(units)) {
          return NodeError(node,
                           absl::StrCat("attribute 'units' must be an integer >= 1, got ", units));
        }
        out.width = static_cast<int64_t>(units);
        auto act_it = node.string_attrs.find("activation");
        if (act_it != node.string_attrs.end()) {
          auto activation = ParseActivation(act_it->second);
          if (!activation.ok()) return NodeError(node, activation.status().message());
          out.activation = *activation;
        }
        ASSIGN_OR_RETURN(const int kernel, ResolveParam(node, node.params[0], ParamRole::kKernel));
        const Shape expected_kernel{in_width, out.width};
        if (spec_.params[kernel].shape != expected_kernel) {
          return NodeError(node,
                           absl::StrCat("kernel '", node.params[0], "' has shape ",
                                        spec_.params[kernel].shape.ToString(), " but input '",
                                        node.inputs[0], "' is ", in_width, " wide and units is ",
                                        out.width, ": expected ", expected_kernel.ToString()));
        }
        out.params.push_back(kernel);
        if (num_params == 2) {
          ASSIGN_OR_RETURN(const int bias, ResolveParam(node, node.params[1], ParamRole::kBias));
          const Shape expected_bias{out.width};
          if (spec_.params[bias].shape != expected_bias) {
            return NodeError(node, absl::StrCat("bias '", node.params[1], "' has shape ",
                                                spec_.params[bias].shape.ToString(), ", expected ",
                                                expected_bias.ToString()));
          }
          out.params.push_back(bias);
        }
        break;
      }
      case OpKind::kRelu:
      case OpKind::kSigmoid:
      case OpKind::kTanh:
      case OpKind::kSoftmax:
        RETURN_IF_ERROR(CheckAttrs(node, {}, {}));
        out.width = in_width;
        break;
      case OpKind::kConcat:
        RETURN_IF_ERROR(CheckAttrs(node, {}, {}));
        out.width = 0;
        for (int v : out.inputs) out.width += graph_.value_widths[v];
        break;
    }
    values_.emplace(node.name, graph_.num_inputs + n);
    graph_.value_widths.push_back(out.width);
    graph_.nodes.push_back(std::move(out));
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
      ASSIGN_OR_RETURN(const int v, FindNode(node, absl::StrCat("output '", name, "'")));
      graph_.output_values.emplace(name, v);
    }
    return absl::OkStatus();
  }

  absl::Status ResolveLoss() {
    auto kind = ParseLoss(spec_.loss.kind);
    if (!kind.ok()) return Annotate(kind.status(), "loss");
    graph_.loss = *kind;
    ASSIGN_OR_RETURN(graph_.loss_value, FindNode(spec_.loss.logits, "loss logits"));
    const int64_t width = graph_.value_widths[graph_.loss_value];
    if (graph_.loss == LossKind::kSigmoidCrossEntropy && width != 1) {
      return absl::InvalidArgumentError(absl::StrCat("loss sigmoid_cross_entropy: logits node '",
                                                     spec_.loss.logits, "' is ", width,
                                                     " wide, expected 1 (labels are [B, 1])"));
    }
    return absl::OkStatus();
  }

  const ModelSpec& spec_;
  ResolvedGraph graph_;
  std::map<std::string, int> values_;        // inputs and nodes defined so far
  std::map<std::string, int> future_nodes_;  // every node name -> its index
  std::map<std::string, int> params_;
  std::vector<ParamRole> roles_;
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

absl::StatusOr<InputKind> ParseInputKind(absl::string_view name) {
  if (name == "ids") return InputKind::kIds;
  if (name == "dense") return InputKind::kDense;
  if (name == "id_list") return InputKind::kIdList;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown input kind '", name, "' (expected ids, dense or id_list)"));
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
