#include "core/model/lookup_plan.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "core/base/hash.h"

namespace tessera {
namespace {

// The example an id at position k of a lookup belongs to.
int64_t ExampleOf(absl::Span<const int64_t> row_splits, int64_t k) {
  if (row_splits.empty()) return k;
  return static_cast<int64_t>(std::upper_bound(row_splits.begin(), row_splits.end(), k) -
                              row_splits.begin()) -
         1;
}

}  // namespace

LookupPlanner::LookupPlanner(const ModelSpec& spec, const ResolvedGraph& graph)
    : inputs_(spec.inputs) {
  tables_.resize(spec.params.size());
  for (size_t p = 0; p < spec.params.size(); ++p) {
    tables_[p].name = spec.params[p].name;
    // Only embedding tables are planned, and they are rank 2 (ResolveModelSpec checks it).
    if (graph.param_is_embedding[p]) tables_[p].rows = spec.params[p].shape.dim(0);
  }
  nodes_.resize(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const ResolvedGraph::Node& node = graph.nodes[n];
    nodes_[n].name = spec.nodes[n].name;
    if (!node.is_embedding()) continue;
    nodes_[n].input = node.inputs[0];
    tables_[node.params[0]].lookups.push_back(static_cast<int>(n));
  }
}

void LookupPlanner::HashInputs(const Batch& batch, LookupPlan& plan) const {
  plan.hashed_rows.resize(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const InputSpec& in = inputs_[i];
    if (in.hash_buckets == 0) continue;
    const Ids& ids = in.kind == InputKind::kIds ? batch.ids.at(in.name)
                                                 : batch.id_lists.at(in.name).ids;
    Ids& rows = plan.hashed_rows[i];
    rows.resize(ids.size());
    for (size_t k = 0; k < ids.size(); ++k) rows[k] = HashBucket(ids[k], in.hash_buckets);
  }
}

Lookup LookupPlanner::LookupOf(const Batch& batch, const LookupPlan& plan, int node) const {
  const int input = nodes_[node].input;
  const InputSpec& in = inputs_[input];
  Lookup lookup;
  if (in.kind == InputKind::kIds) {
    lookup.rows = batch.ids.at(in.name);
  } else {
    const IdList& list = batch.id_lists.at(in.name);
    lookup.rows = list.ids;
    lookup.row_splits = list.row_splits;
    lookup.weights = list.weights;
  }
  if (in.hash_buckets > 0) lookup.rows = plan.hashed_rows[input];
  return lookup;
}

// Note [Reused lookup plans]
// Planning a table's lookups sorts the batch's ids (UniqueIds), the costliest part of a step
// after the matrix products. A distributed worker needs the plan twice: RowsNeeded, to know which
// rows to gather, and ForwardBackward, once the rows have arrived. So a workspace remembers the
// plan it holds, and the next call checks it against its batch in one linear pass (every
// example's id sits at its slot, the unique ids (a SortedIds) lie inside the table, and each is
// used) before trusting it. A different batch fails the check, usually at its first
// example, and is planned from scratch: the check makes reuse safe, never only likely.
bool LookupPlanner::Fits(const Batch& batch, int p, LookupPlan& plan) const {
  if (static_cast<size_t>(p) >= plan.planned.size() || !plan.planned[p]) return false;
  const SortedIds& unique = plan.unique_ids[p];
  const int64_t table_rows = tables_[p].rows;
  if (unique.empty() || unique.front() < 0 || unique.back() >= table_rows) {
    return false;
  }
  const size_t num_unique = unique.size();
  plan.plan_marks.assign(num_unique, 0);
  size_t used = 0;
  for (int n : tables_[p].lookups) {
    const absl::Span<const int64_t> ids = LookupOf(batch, plan, n).rows;
    const std::vector<int64_t>& slots = plan.slots[n];
    if (slots.size() != ids.size()) return false;
    for (size_t b = 0; b < ids.size(); ++b) {
      const uint64_t slot = static_cast<uint64_t>(slots[b]);
      if (slot >= num_unique || unique[slot] != ids[b]) return false;
      used += plan.plan_marks[slot] == 0;
      plan.plan_marks[slot] = 1;
    }
  }
  return used == num_unique;
}

absl::Status LookupPlanner::Plan(const Batch& batch, const std::vector<bool>& tables,
                                 LookupPlan& plan) const {
  const size_t num_params = tables_.size();
  plan.unique_ids.resize(num_params);
  plan.lookup_ids.resize(num_params);
  plan.slots.resize(nodes_.size());
  plan.planned.resize(num_params, false);
  for (size_t p = 0; p < num_params; ++p) {
    const std::vector<int>& lookups = tables_[p].lookups;
    if (lookups.empty()) continue;
    // A fitting plan also proves every id of the table's lookups in range.
    if (tables[p] && Fits(batch, static_cast<int>(p), plan)) continue;
    plan.planned[p] = false;
    const int64_t table_rows = tables_[p].rows;
    Ids& all_ids = plan.lookup_ids[p];
    all_ids.clear();
    for (int n : lookups) {
      const Lookup lookup = LookupOf(batch, plan, n);
      for (size_t k = 0; k < lookup.rows.size(); ++k) {
        if (lookup.rows[k] < 0 || lookup.rows[k] >= table_rows) {
          const std::string& feature = inputs_[nodes_[n].input].name;
          return absl::InvalidArgumentError(absl::StrCat(
              "node '", nodes_[n].name, "': id ", lookup.rows[k], " of example ",
              ExampleOf(lookup.row_splits, static_cast<int64_t>(k)), " (feature '", feature,
              "') is out of range [0, ", table_rows, ") of table '", tables_[p].name, "'"));
        }
      }
      if (tables[p]) all_ids.insert(all_ids.end(), lookup.rows.begin(), lookup.rows.end());
    }
    if (!tables[p]) continue;
    UniqueIds(all_ids, plan.unique_ids[p], plan.scratch_slots);
    auto next = plan.scratch_slots.begin();
    for (int n : lookups) {
      const size_t count = LookupOf(batch, plan, n).rows.size();
      plan.slots[n].assign(next, next + static_cast<std::ptrdiff_t>(count));
      next += static_cast<std::ptrdiff_t>(count);
    }
    plan.planned[p] = true;
  }
  return absl::OkStatus();
}

absl::Status LookupPlanner::CheckGathered(int p, absl::Span<const int64_t> ids,
                                          const LookupPlan& plan) const {
  const SortedIds& needed = plan.unique_ids[p];
  if (!std::equal(ids.begin(), ids.end(), needed.begin(), needed.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "params: the gathered rows of '", tables_[p].name, "' are for ", ids.size(),
        " ids that differ from the ", needed.size(),
        " sorted unique ids the batch needs (pass exactly Model::RowsNeeded's ids)"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
