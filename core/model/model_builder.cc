#include "tessera/model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/ops.h"
#include "tessera/status.h"

namespace tessera {

ModelBuilder::ModelBuilder(std::string name, uint64_t seed) : seed_(seed) {
  spec_.name = std::move(name);
}

void ModelBuilder::Fail(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

bool ModelBuilder::Check(Value v, const std::string& what) {
  if (!error_.ok()) return false;
  if (v.owner != this || v.id < 0 || v.id >= static_cast<int>(value_names_.size())) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat(what, ": a value of another builder, or an unset Value")));
    return false;
  }
  return true;
}

std::string ModelBuilder::NodeName(const std::string& given, const std::string& op) {
  if (!given.empty()) return given;
  // The first free "<op>_<k>": a name the caller gave later could still collide, which
  // ResolveModelSpec reports.
  std::string name;
  do {
    name = absl::StrCat(op, "_", ++op_counts_[op]);
  } while (std::find(value_names_.begin(), value_names_.end(), name) != value_names_.end());
  return name;
}

int ModelBuilder::AddParam(std::string name, Shape shape, std::string initializer,
                           bool partitioned) {
  const int index = static_cast<int>(spec_.params.size());
  ParamSpec param;
  param.name = std::move(name);
  param.shape = std::move(shape);
  param.initializer.name = std::move(initializer);
  param.initializer.seed = DeriveParamSeed(seed_, index);
  param.partitioned = partitioned;
  spec_.params.push_back(std::move(param));
  return index;
}

ModelBuilder::Value ModelBuilder::AddValue(const std::string& name, int64_t width) {
  value_names_.push_back(name);
  value_widths_.push_back(width);
  return Value{static_cast<int>(value_names_.size()) - 1, this};
}

ModelBuilder::Value ModelBuilder::DenseInput(const std::string& name, int64_t width) {
  spec_.inputs.push_back({name, InputKind::kDense, width});
  return AddValue(name, width);
}

ModelBuilder::Value ModelBuilder::IdInput(const std::string& name, int64_t hash_buckets) {
  spec_.inputs.push_back({name, InputKind::kIds, 1, hash_buckets});
  return AddValue(name, 1);
}

ModelBuilder::Value ModelBuilder::IdListInput(const std::string& name, int64_t hash_buckets) {
  spec_.inputs.push_back({name, InputKind::kIdList, 1, hash_buckets});
  return AddValue(name, 1);
}

ModelBuilder::Table ModelBuilder::EmbeddingTable(const std::string& name, int64_t rows,
                                                 int64_t dim) {
  return Table{AddParam(name, Shape{rows, dim}, "random_uniform", /*partitioned=*/true), this};
}

ModelBuilder::Value ModelBuilder::Embedding(Value ids, Table table, const std::string& combiner,
                                            const std::string& name) {
  const std::string node_name = NodeName(name, kOpEmbedding);
  if (!Check(ids, absl::StrCat("node '", node_name, "'"))) return Value{};
  if (table.owner != this || table.param < 0 ||
      table.param >= static_cast<int>(spec_.params.size())) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("node '", node_name, "': a table of another builder, or an unset Table")));
    return Value{};
  }
  NodeSpec node;
  node.name = node_name;
  node.op = kOpEmbedding;
  node.inputs = {value_names_[ids.id]};
  node.params = {spec_.params[table.param].name};
  if (!combiner.empty()) node.string_attrs["combiner"] = combiner;
  spec_.nodes.push_back(std::move(node));
  return AddValue(node_name, spec_.params[table.param].shape.dim(1));
}

ModelBuilder::Value ModelBuilder::Op(const std::string& op_name, const std::vector<Value>& inputs,
                                     const std::map<std::string, double>& attrs,
                                     const std::map<std::string, std::string>& string_attrs,
                                     const std::string& name, int num_params) {
  const std::string node_name = NodeName(name, op_name);
  const std::string context = absl::StrCat("node '", node_name, "' (", op_name, ")");
  for (const Value& v : inputs) {
    if (!Check(v, context)) return Value{};
  }
  const OpDef* op = FindOp(op_name);
  if (op == nullptr) {
    Fail(absl::InvalidArgumentError(absl::StrCat(context, ": unknown op")));
    return Value{};
  }
  if (num_params < 0) num_params = static_cast<int>(op->params.size());
  OpShapeArgs args;
  for (const Value& v : inputs) args.input_widths.push_back(value_widths_[v.id]);
  args.num_params = num_params;
  args.attrs = {&attrs, &string_attrs};
  absl::StatusOr<OpShape> shape =
      inputs.empty() ? absl::InvalidArgumentError("no inputs") : op->infer(args);
  if (!shape.ok()) {
    Fail(absl::InvalidArgumentError(absl::StrCat(context, ": ", shape.status().message())));
    return Value{};
  }
  NodeSpec node;
  node.name = node_name;
  node.op = op_name;
  for (const Value& v : inputs) node.inputs.push_back(value_names_[v.id]);
  for (int j = 0; j < num_params && j < static_cast<int>(shape->param_shapes.size()); ++j) {
    const Shape& param_shape = shape->param_shapes[j];
    const int p = AddParam(absl::StrCat(node_name, "/", op->params[j].role), param_shape,
                           param_shape.rank() >= 2 ? "glorot_uniform" : "zeros",
                           /*partitioned=*/false);
    node.params.push_back(spec_.params[p].name);
  }
  node.attrs = attrs;
  node.string_attrs = string_attrs;
  spec_.nodes.push_back(std::move(node));
  return AddValue(node_name, shape->width);
}

ModelBuilder::Value ModelBuilder::Dense(Value x, int64_t units, const std::string& activation,
                                        const std::string& name, bool bias) {
  return Op(kOpDense, {x}, {{"units", static_cast<double>(units)}}, {{"activation", activation}},
            name, bias ? 2 : 1);
}

ModelBuilder::Value ModelBuilder::Relu(Value x, const std::string& name) {
  return Op("relu", {x}, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Sigmoid(Value x, const std::string& name) {
  return Op("sigmoid", {x}, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Tanh(Value x, const std::string& name) {
  return Op("tanh", {x}, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Softmax(Value x, const std::string& name) {
  return Op("softmax", {x}, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Log1p(Value x, const std::string& name) {
  return Op("log1p", {x}, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Concat(const std::vector<Value>& xs, const std::string& name) {
  return Op("concat", xs, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Add(const std::vector<Value>& xs, const std::string& name) {
  return Op("add", xs, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Multiply(const std::vector<Value>& xs, const std::string& name) {
  return Op("multiply", xs, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Dot(Value a, Value b, const std::string& name) {
  return Op("dot", {a, b}, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::DotInteraction(const std::vector<Value>& zs,
                                                 const std::string& name) {
  return Op("dot_interaction", zs, {}, {}, name);
}
ModelBuilder::Value ModelBuilder::Cross(Value x0, Value xl, const std::string& name) {
  return Op("cross", {x0, xl}, {}, {}, name);
}

int64_t ModelBuilder::Width(Value v) const {
  if (v.owner != this || v.id < 0 || v.id >= static_cast<int>(value_widths_.size())) return 0;
  return value_widths_[v.id];
}

void ModelBuilder::Output(const std::string& name, Value v) {
  if (!Check(v, absl::StrCat("output '", name, "'"))) return;
  spec_.outputs[name] = value_names_[v.id];
}

void ModelBuilder::Loss(const std::string& kind, Value logits) {
  if (!Check(logits, absl::StrCat("loss ", kind))) return;
  spec_.loss = {kind, value_names_[logits.id]};
}

absl::StatusOr<ModelSpec> ModelBuilder::Build() const {
  TESSERA_RETURN_IF_ERROR(Annotate(error_, absl::StrCat("model '", spec_.name, "'")));
  TESSERA_RETURN_IF_ERROR(
      Annotate(ResolveModelSpec(spec_).status(), absl::StrCat("model '", spec_.name, "'")));
  return spec_;
}

}  // namespace tessera
