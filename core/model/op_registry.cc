#include "tessera/ops.h"

#include <algorithm>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

// Defined in core/model/builtin_ops.cc.
std::vector<OpDef> BuiltinOps();

namespace {

absl::Status CheckOpDef(const OpDef& op) {
  if (op.name.empty()) return absl::InvalidArgumentError("RegisterOp: an op needs a name");
  const std::string context = absl::StrCat("RegisterOp '", op.name, "': ");
  if (!op.infer || !op.forward || !op.backward) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, "infer, forward and backward must all be set"));
  }
  if (op.min_inputs < 1 || (op.max_inputs != -1 && op.max_inputs < op.min_inputs)) {
    return absl::InvalidArgumentError(absl::StrCat(context, "inputs must be min_inputs >= 1 and ",
                                                   "max_inputs >= min_inputs or -1"));
  }
  bool optional_seen = false;
  for (const OpParamDef& param : op.params) {
    if (param.role.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(context, "a parameter needs a role"));
    }
    if (optional_seen && !param.optional) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, "only trailing parameters may be optional"));
    }
    optional_seen = optional_seen || param.optional;
  }
  return absl::OkStatus();
}

class Registry {
 public:
  Registry() {
    for (OpDef& op : BuiltinOps()) {
      builtin_names_.push_back(op.name);
      std::string name = op.name;
      ops_.emplace(std::move(name), std::make_unique<const OpDef>(std::move(op)));
    }
    std::sort(builtin_names_.begin(), builtin_names_.end());
  }

  absl::Status Register(OpDef op) {
    if (absl::Status status = CheckOpDef(op); !status.ok()) return status;
    absl::MutexLock lock(&mu_);
    // "embedding" is the Model's own node (sparse rows), reserved like a built-in.
    if (ops_.count(op.name) != 0 || op.name == "embedding") {
      return absl::AlreadyExistsError(absl::StrCat("RegisterOp: an op named '", op.name,
                                                   "' is already registered"));
    }
    std::string name = op.name;
    ops_.emplace(std::move(name), std::make_unique<const OpDef>(std::move(op)));
    return absl::OkStatus();
  }

  const OpDef* Find(const std::string& name) const {
    absl::MutexLock lock(&mu_);
    auto it = ops_.find(name);
    return it == ops_.end() ? nullptr : it->second.get();
  }

  std::vector<std::string> Names() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> names;
    for (const auto& [name, op] : ops_) names.push_back(name);
    return names;
  }

  const std::vector<std::string>& builtin_names() const { return builtin_names_; }

 private:
  mutable absl::Mutex mu_;
  // Entries are never removed, so an OpDef* stays valid once handed out.
  std::map<std::string, std::unique_ptr<const OpDef>> ops_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> builtin_names_;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed: ops outlive every model
  return *registry;
}

}  // namespace

double OpAttrs::Number(const std::string& name, double fallback) const {
  if (numbers == nullptr) return fallback;
  auto it = numbers->find(name);
  return it == numbers->end() ? fallback : it->second;
}

std::string OpAttrs::String(const std::string& name, const std::string& fallback) const {
  if (strings == nullptr) return fallback;
  auto it = strings->find(name);
  return it == strings->end() ? fallback : it->second;
}

bool OpAttrs::HasNumber(const std::string& name) const {
  return numbers != nullptr && numbers->count(name) != 0;
}

absl::Status RegisterOp(OpDef op) { return TheRegistry().Register(std::move(op)); }

const OpDef* FindOp(const std::string& name) { return TheRegistry().Find(name); }

std::vector<std::string> RegisteredOpNames() { return TheRegistry().Names(); }

std::vector<std::string> BuiltinOpNames() { return TheRegistry().builtin_names(); }

}  // namespace tessera
