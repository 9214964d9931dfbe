#include "serving/internal/request_shape.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::serving::internal {

std::string InputList(const InstanceFormat& format) {
  return absl::StrJoin(format.inputs, ", ", [](std::string* out, const InstanceFormat::Input& in) {
    absl::StrAppend(out, in.name);
  });
}

int InputIndex(const InstanceFormat& format, absl::string_view name) {
  for (size_t i = 0; i < format.inputs.size(); ++i) {
    if (format.inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::Status RequestShape::Check() const {
  if (top_ != JsonKind::kObject) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request must be a JSON object with \"instances\" or \"inputs\", got ",
                     JsonKindName(top_)));
  }
  const bool bad_signature = signature_kind_.has_value() && *signature_kind_ != JsonKind::kString;
  if (bad_signature && (bad_field_.empty() || bad_field_ > "signature_name")) {
    return absl::InvalidArgumentError(absl::StrCat("\"signature_name\" must be a string, got ",
                                                   JsonKindName(*signature_kind_)));
  }
  if (!bad_field_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown field \"", ShownName(bad_field_),
                     "\"; a predict request has \"instances\" or \"inputs\", and optionally "
                     "\"signature_name\""));
  }
  if (instances_fields_ > 0 && inputs_fields_ > 0) {
    return absl::InvalidArgumentError(
        "a predict request has either \"instances\" (rows) or \"inputs\" (columns), not both");
  }
  if (instances_fields_ == 0 && inputs_fields_ == 0) {
    return absl::InvalidArgumentError("the request has no \"instances\" (or \"inputs\")");
  }
  if (columnar()) {
    if (inputs_kind_ != JsonKind::kObject && inputs_kind_ != JsonKind::kArray) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\" must be an object mapping each input to its values (or, "
                       "for a signature of one input, the array of its values), got ",
                       JsonKindName(inputs_kind_)));
    }
  } else if (instances_kind_ != JsonKind::kArray || instances_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"instances\" must be a non-empty array, got ",
        instances_kind_ == JsonKind::kArray ? "an empty array" : JsonKindName(instances_kind_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RequestShape::CheckColumns(const InstanceFormat& format) const {
  const auto column_error = [](const std::string& input, JsonKind kind, int64_t count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"inputs\": input '", input,
        "' must be a non-empty array of values, one per instance, "
        "got ",
        kind == JsonKind::kArray && count == 0 ? "an empty array" : JsonKindName(kind)));
  };
  if (inputs_kind_ == JsonKind::kArray) {
    if (format.inputs.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\" is an array, but signature '", format.signature, "' has ",
                       format.inputs.size(), " inputs (", InputList(format),
                       "): send an object mapping each input to its values"));
    }
    if (inputs_count_ == 0) {
      return column_error(format.inputs[0].name, JsonKind::kArray, 0);
    }
    return inputs_count_;
  }
  if (too_many_columns_) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"inputs\" has more than ", kMaxColumnarFields, " fields"));
  }
  const ColumnShape* unknown = nullptr;
  for (const ColumnShape& column : columns_) {
    if (InputIndex(format, column.name) < 0 &&
        (unknown == nullptr || column.name < unknown->name))
      unknown = &column;
  }
  if (unknown != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"inputs\": unknown input '", ShownName(unknown->name),
                     "'; the signature's inputs are ", InputList(format)));
  }
  std::vector<const ColumnShape*> columns;
  for (const InstanceFormat::Input& input : format.inputs) {
    const ColumnShape* column = Find(input.name);
    if (column == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\" has no input '", input.name, "'"));
    }
    columns.push_back(column);
  }
  for (const ColumnShape* column : columns) {
    if (column->kind != JsonKind::kArray || column->count == 0) {
      return column_error(column->name, column->kind, column->count);
    }
  }
  for (const ColumnShape* column : columns) {
    if (column->count != columns[0]->count) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\": input '", column->name, "' has ", column->count,
                       " values, input '", columns[0]->name, "' has ", columns[0]->count,
                       "; every input needs one value per instance"));
    }
  }
  return columns[0]->count;
}

bool RequestShape::Value(JsonKind kind) {
  if (depth_ == 0) {
    top_ = kind;
  } else if (depth_ == 1) {
    if (key_ == "instances") {
      instances_kind_ = kind;
      instances_ = 0;
    } else if (key_ == "inputs") {
      inputs_kind_ = kind;
      inputs_count_ = 0;
      columns_.clear();
      column_index_.clear();
      too_many_columns_ = false;
      column_ = -1;
    } else if (key_ == "signature_name") {
      signature_kind_ = kind;
    }
  } else if (depth_ == 2) {
    if (in_instances_) {
      ++instances_;
    } else if (in_inputs_array_) {
      ++inputs_count_;
    } else if (in_inputs_object_ && column_ >= 0) {
      columns_[column_].kind = kind;
      columns_[column_].count = 0;
    }
  } else if (depth_ == 3 && in_column_) {
    ++columns_[column_].count;
  }
  return true;
}

void RequestShape::Column(const string_t& name) {
  auto it = column_index_.find(name);
  if (it == column_index_.end()) {
    if (columns_.size() >= kMaxColumnarFields) {
      too_many_columns_ = true;
      column_ = -1;
      return;
    }
    it = column_index_.emplace(name, static_cast<int>(columns_.size())).first;
    columns_.push_back({name});
  }
  column_ = it->second;
  ++columns_[column_].occurrences;
}

const ColumnShape* RequestShape::Find(const std::string& name) const {
  auto it = column_index_.find(name);
  return it == column_index_.end() ? nullptr : &columns_[it->second];
}

}  // namespace tessera::serving::internal
