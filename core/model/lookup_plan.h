// Lookup planning: which rows of each embedding table a batch reads, and where each of its ids
// sits among them. Planning a table collects the ids of every embedding node that looks it up,
// sorts them into the table's sorted unique ids (the rows a distributed worker gathers: what
// Model::RowsNeeded returns) and gives each id its slot there (the row it reads among gathered
// rows, and the row of the sparse gradient it adds to). Model plans with a LookupPlanner in
// RowsNeeded, Forward and ForwardBackward, and keeps the plan in its StepWorkspace so that the
// next call of the same batch reuses it (Note [Reused lookup plans] in core/model/lookup_plan.cc).
//
// Thread-safety: a LookupPlanner is immutable after construction; any number of threads may use
// it concurrently, each with its own LookupPlan. A LookupPlan is not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/base/sorted_ids.h"
#include "tessera/data.h"
#include "tessera/model.h"

namespace tessera {

// One batch's lookup plan, in a StepWorkspace; grows to the largest batch seen.
struct LookupPlan {
  // Per input (hashed ids and id_list inputs only): the table row of each of the batch's ids.
  std::vector<Ids> hashed_rows;
  // Per parameter (embedding tables only): the batch's sorted unique ids, and a concatenation
  // buffer of all its lookups' ids.
  std::vector<SortedIds> unique_ids;
  std::vector<Ids> lookup_ids;
  // Per node (embedding nodes only): the position of each of its ids among unique_ids, which is
  // also the row it reads from a gathered table.
  std::vector<std::vector<int64_t>> slots;
  std::vector<int64_t> scratch_slots;
  // Per parameter: unique_ids and its lookups' slots hold the plan of some earlier batch, which
  // the next call checks against its own batch before sorting again (Note [Reused lookup plans]).
  std::vector<bool> planned;
  std::vector<uint8_t> plan_marks;  // scratch of that check: which unique ids a batch uses
};

// An embedding node's ids in one batch, as table rows.
struct Lookup {
  absl::Span<const int64_t> rows;        // one per id
  absl::Span<const int64_t> row_splits;  // empty: one id per example
  absl::Span<const float> weights;       // empty: every weight 1
};

// Plans the embedding lookups of one resolved model. Holds its own copy of what it needs of the
// spec, so it stays valid when the Model holding it moves.
class LookupPlanner {
 public:
  LookupPlanner() = default;
  // Precondition: `graph` is ResolveModelSpec(spec)'s.
  LookupPlanner(const ModelSpec& spec, const ResolvedGraph& graph);

  // True when some embedding node looks table p up (so RowsNeeded names it). Precondition: p is
  // a valid parameter index.
  bool HasLookups(int p) const { return !tables_[p].lookups.empty(); }

  // Hashes the batch's hashed inputs into plan.hashed_rows. Precondition: the batch's ids and
  // id_list features are present and well formed (Model::CheckBatch passed).
  void HashInputs(const Batch& batch, LookupPlan& plan) const;
  // Embedding node `node`'s ids in `batch`, as table rows. Precondition: HashInputs(batch, plan)
  // ran.
  Lookup LookupOf(const Batch& batch, const LookupPlan& plan, int node) const;

  // Checks every id against its table and, for each table p with tables[p], computes
  // plan.unique_ids[p] and the slots of its lookups (or keeps the plan already there when it fits
  // the batch). InvalidArgument naming the node, the id, its example, the feature and the table
  // when an id is outside the table's rows. Precondition: HashInputs(batch, plan) ran.
  absl::Status Plan(const Batch& batch, const std::vector<bool>& tables, LookupPlan& plan) const;

  // OK when `ids`, the ids a caller gathered table p's rows for, are exactly plan.unique_ids[p];
  // InvalidArgument otherwise. Precondition: Plan planned table p.
  absl::Status CheckGathered(int p, absl::Span<const int64_t> ids, const LookupPlan& plan) const;

 private:
  // True when `plan` already holds exactly the plan of table p for `batch` (its ids included in
  // range); O(batch size + unique ids).
  bool Fits(const Batch& batch, int p, LookupPlan& plan) const;

  struct Table {
    std::string name;
    int64_t rows = 0;
    std::vector<int> lookups;  // the embedding nodes that look it up
  };
  struct Node {
    std::string name;
    int input = -1;  // the ids or id_list input an embedding node reads; -1: not an embedding
  };
  std::vector<InputSpec> inputs_;  // spec.inputs
  std::vector<Table> tables_;      // per spec.params entry
  std::vector<Node> nodes_;        // per graph node
};

}  // namespace tessera
