#include "cli/inspect_command.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/status.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// "{a: 1, b: 0.5}"; "" for no entries.
template <typename Map>
std::string Attrs(const Map& attrs) {
  if (attrs.empty()) return "";
  return absl::StrCat(" {",
                      absl::StrJoin(attrs, ", ",
                                    absl::PairFormatter(absl::AlphaNumFormatter(), ": ",
                                                        absl::AlphaNumFormatter())),
                      "}");
}

// "tessera 0.1.0"; for a file written before versions were recorded, which says so.
std::string WrittenBy(const std::string& writer_version) {
  if (writer_version.empty()) return "an unknown version (written before versions were recorded)";
  return absl::StrCat("tessera ", writer_version);
}

std::string Names(const std::vector<std::string>& names) {
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

void DescribeTensors(const char* title, const std::vector<TensorSignature>& tensors,
                     std::ostream& out) {
  out << "    " << title << ":\n";
  for (const TensorSignature& t : tensors) {
    out << "      " << t.name << "  " << DTypeName(t.dtype) << " [" << absl::StrJoin(t.shape, ", ")
        << "]\n";
  }
}

}  // namespace

void DescribeCheckpoint(const CheckpointManifest& manifest, std::ostream& out) {
  out << "global step: " << manifest.global_step << "\n";
  out << "run: "
      << (manifest.run_id.empty() ? "none (written before run ids)" : manifest.run_id.ToString())
      << "\n";
  out << "written by: " << WrittenBy(manifest.writer_version) << "\n";
  out << "variables: " << manifest.variables.size() << "\n";
  for (const CheckpointVariable& v : manifest.variables) {
    out << "  " << v.name << "  " << v.shape.ToString() << "  " << DTypeName(v.dtype) << "  step "
        << v.step << "\n";
    out << "    optimizer: "
        << (v.optimizer ? absl::StrCat(v.optimizer->name, Attrs(v.optimizer->params)) : "none")
        << "\n";
    out << "    slots: " << Names(v.slot_names) << "\n";
    out << "    slices: " << v.slices.size() << "\n";
    for (const SliceFileRef& slice : v.slices) {
      out << "      " << slice.file << "  rows [" << slice.row_offset << ", "
          << slice.row_offset + slice.rows << ")\n";
    }
  }
}

void DescribeExportedModel(const OpenedModel& opened, std::ostream& out) {
  const ModelDescription& model = opened.description;
  const std::map<std::string, ConstTensorView>& variables = opened.variables->views();
  const ModelSpec& spec = model.spec;
  out << "format: " << opened.format_version << "\n";
  out << "written by: " << WrittenBy(model.writer_version) << "\n";
  out << "name: " << spec.name << "\n";
  out << "step: " << model.step << "\n";
  out << "signatures: " << model.signatures.size() << "\n";
  for (const Signature& signature : model.signatures) {
    out << "  " << signature.name << "\n";
    DescribeTensors("inputs", signature.inputs, out);
    DescribeTensors("outputs", signature.outputs, out);
  }
  out << "inputs: " << spec.inputs.size() << "\n";
  for (const InputSpec& in : spec.inputs) {
    out << "  " << in.name << "  " << InputKindName(in.kind) << "  width " << in.width << "\n";
  }
  out << "layers: " << spec.nodes.size() << "\n";
  for (const NodeSpec& node : spec.nodes) {
    out << "  " << node.name << "  " << node.op << "(" << absl::StrJoin(node.inputs, ", ") << ")";
    if (!node.params.empty()) out << "  params " << absl::StrJoin(node.params, ", ");
    out << Attrs(node.attrs) << Attrs(node.string_attrs) << "\n";
  }
  out << "outputs: " << spec.outputs.size() << "\n";
  for (const auto& [name, node] : spec.outputs) out << "  " << name << " <- " << node << "\n";
  out << "loss: " << spec.loss.kind << " on " << spec.loss.logits << "\n";
  int64_t values = 0;
  for (const auto& [name, tensor] : variables) values += tensor.size();
  out << "variables: " << variables.size() << " (" << values << " values)\n";
  for (const ParamSpec& param : spec.params) {
    auto it = variables.find(param.name);
    const std::string shape = it == variables.end() ? "missing" : it->second.shape().ToString();
    out << "  " << param.name << "  " << shape << (param.trainable ? "" : "  frozen")
        << (param.partitioned ? "  partitioned" : "") << "\n";
  }
}

absl::Status RunInspect(const std::string& path, std::ostream& out, bool verify) {
  std::error_code error;
  fs::path dir = path;
  const fs::file_status status = fs::status(dir, error);
  if (!fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat("no such file or directory: ", path));
  }
  if (fs::is_regular_file(status)) {
    const std::string file = dir.filename().string();
    if (file != kManifestFile && file != kModelFile) {
      return absl::NotFoundError(absl::StrCat(path, " is neither a checkpoint manifest (",
                                              kManifestFile, ") nor an exported model (",
                                              kModelFile, ")"));
    }
    dir = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  }
  const bool has_manifest = fs::exists(dir / kManifestFile, error);
  const bool has_model = fs::exists(dir / kModelFile, error);
  if (!has_manifest && !has_model) {
    return absl::NotFoundError(absl::StrCat(path, " holds neither a checkpoint (", kManifestFile,
                                            ") nor an exported model (", kModelFile, ")"));
  }
  if (has_manifest) {
    const std::string file = (dir / kManifestFile).string();
    absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir.string());
    TESSERA_RETURN_IF_ERROR(Annotate(manifest.status(), file));
    out << "checkpoint " << dir.string() << "\n";
    DescribeCheckpoint(*manifest, out);
  }
  if (has_model) {
    const std::string file = (dir / kModelFile).string();
    absl::StatusOr<OpenedModel> model = OpenExportedModel(dir.string());
    TESSERA_RETURN_IF_ERROR(Annotate(model.status(), file));
    if (has_manifest) out << "\n";
    out << "exported model " << dir.string() << "\n";
    DescribeExportedModel(*model, out);
    if (verify) {
      // Serving verifies a piece of a value when it first reads from it; this reads them all.
      for (const auto& [name, value] : model->variables->views()) {
        TESSERA_RETURN_IF_ERROR(model->variables->CheckAll(name));
      }
      out << "values: verified (every checksum, every value finite)\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::cli
