// The registry of every atom and message type Tessera's actors exchange: the atoms, the protocol
// version, Tessera's own message types and their `inspect` overloads (so they can cross the
// network), and the one function that registers them all with an actor system. The core types
// that travel as they are have their inspect overloads in actors/base/core_inspect.h (included
// here), on the wire machinery of actors/base/wire.h (Note [Bulk tensor payloads]); the actor
// handles and the few messages that carry them are in actors/base/actor_handles.h, which builds
// on this file.
//
// Thread-safety: the types are values; RegisterTesseraTypes mutates only the config it is given.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/node_id.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/base/core_inspect.h"
#include "core/mirrored/mirrored_replica.h"
#include "core/ps/shard_op.h"
#include "core/ps/shard_state.h"
#include "core/training/job_description.h"
#include "core/variables/aggregation.h"
#include "core/variables/scatter.h"
#include "tessera/tensor.h"

namespace tessera {

// -- Atoms (at most 10 characters each) ------------------------------------------------------

// PS node actor (actors/ps/ps_node_actor.h).
using create_shard_atom = caf::atom_constant<caf::atom("new_shard")>;
using drop_shard_atom = caf::atom_constant<caf::atom("drop_shard")>;
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using reclaim_atom = caf::atom_constant<caf::atom("reclaim")>;
using lease_atom = caf::atom_constant<caf::atom("lease")>;
// Shard actor (actors/ps/shard_actor.h): the backup it forwards its changes to.
using backup_atom = caf::atom_constant<caf::atom("backup")>;
using backup_lost_atom = caf::atom_constant<caf::atom("bkp_lost")>;
// A PS node's forward link (actors/ps/forward_link.h), local only.
using forward_atom = caf::atom_constant<caf::atom("forward")>;
using round_atom = caf::atom_constant<caf::atom("round")>;
// A shard's background writer (actors/ps/shard_actor.cc), local only.
using write_atom = caf::atom_constant<caf::atom("write")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using batch_atom = caf::atom_constant<caf::atom("batch")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;

// Worker actor (actors/scheduling/worker_actor.h) and coordinator actor
// (actors/scheduling/coordinator_actor.h).
using run_atom = caf::atom_constant<caf::atom("run")>;
using dispatch_atom = caf::atom_constant<caf::atom("dispatch")>;
using add_worker_atom = caf::atom_constant<caf::atom("add_worker")>;
using kill_worker_atom = caf::atom_constant<caf::atom("kill_wrkr")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using watch_ps_atom = caf::atom_constant<caf::atom("watch_ps")>;
using chaos_atom = caf::atom_constant<caf::atom("chaos")>;
using workers_atom = caf::atom_constant<caf::atom("workers")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;

// Networked nodes (actors/base/node_gate.h, cluster/network/network.h).
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using directory_atom = caf::atom_constant<caf::atom("directory")>;
// Mirrored replica actor (actors/mirrored/mirrored_replica_actor.h).
using mirror_link_atom = caf::atom_constant<caf::atom("m_link")>;
using mirror_step_atom = caf::atom_constant<caf::atom("m_step")>;
using mirror_ring_atom = caf::atom_constant<caf::atom("m_ring")>;
using mirror_run_atom = caf::atom_constant<caf::atom("m_run")>;
using mirror_create_atom = caf::atom_constant<caf::atom("m_create")>;
using mirror_read_atom = caf::atom_constant<caf::atom("m_read")>;
using mirror_load_atom = caf::atom_constant<caf::atom("m_load")>;
using mirror_save_atom = caf::atom_constant<caf::atom("m_save")>;
using mirror_abort_atom = caf::atom_constant<caf::atom("m_abort")>;
using mirror_eval_atom = caf::atom_constant<caf::atom("m_eval")>;
using mirror_probe_atom = caf::atom_constant<caf::atom("m_probe")>;
using mirror_listen_atom = caf::atom_constant<caf::atom("m_listen")>;
using mirror_data_atom = caf::atom_constant<caf::atom("m_data")>;

// A network transport's sweep of its idle connections (cluster/network/transport.cc), local only.
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;

// The protocol every networked node speaks. Bump it with any change to a message type, an actor
// interface or their meaning: a node refuses a peer of another version (actors/base/node_gate.h).
// 2: create_shard names the shard's owner; 3: shard calls batched per PS node; 4: every shard
// operation is a ShardOp (core/ps/shard_op.h), sent alone or in a batch; 5: slices, SaveOp and
// manifest entries carry their checkpoint's identity (CheckpointId, core/checkpoint/checkpoint.h);
// 6: a worker asks for the variable directory with its task and JobDescription, and is refused when
// its job differs; 7: ShardInfo carries update counts and hottest rows, InfoOp and stats_atom ask
// for K of them; 8: closures carry their queue and resolved mark, updates their UpdateId (Note
// [Exactly-once updates], core/ps/update_ledger.h), ShardInfo the step and duplicates; a PS node
// keeps a lost coordinator's shards for a lease and gives them back on reclaim_atom;
// SaveOp::in_background; 9: the mirrored replica actor (actors/mirrored/mirrored_replica_actor.h)
// and its messages, a ring naming its previous replica; 10: a shard forwards its changes to a
// backup (backup_atom, then named replicate_atom, Note [Shard backups] in actors/ps/shard_actor.h);
// 11: RestoreOp carries the ledger of updates applied (a backup takes its primary's); 12:
// reclaim_atom names the run and
// answers HeldShards (a restarted coordinator re-adopts its run's shards), ShardInfo carries the
// ledger's marks; 13: a primary whose backup failed holds its acknowledgements and reports the loss
// (backup_lost_atom) through its node to its owner, which answers with backup_atom (Note [A lost
// backup is struck before the primary acknowledges alone], actors/ps/shard_actor.h); 14: a PS node
// sends its primaries' changes to a backup node as batches to that node (Note [A node's forwards
// travel together], actors/ps/forward_link.h); 15: replicate_atom is backup_atom (its value is the
// atom "backup"), "replica" meaning only TF's replicas; 16: a closure carries the global step it
// trains (Closure::step; a train step's batch travelled as its "batch" argument), and a worker
// slot's status names it (last_step); 17: a mirrored replica answers a SaveOp for a variable
// (mirror_save_atom) with the SavedSlice it wrote, as a shard does (Note [One save path],
// core/checkpoint/save.h).
constexpr int32_t kProtocolVersion = 17;

// -- Message types (the core types ShardSpec, TensorSlice, ShardInfo, Tensor, IndexedSlices,
// OptimizerSpec, InitializerSpec and every ShardOp and its result travel as they are) -----------

// One op's outcome in a batch: `error` (none when it succeeded), else the op's result.
struct ShardReply {
  caf::error error;
  ShardOpResult result;
};

// An op addressed to one of a PS node's shards by the shard actor's id (a batch to the node,
// actors/ps/ps_node_actor.h).
struct ShardCall {
  uint64_t shard = 0;
  ShardOp op;
};

// The hottest rows per shard a stats request without a K asks for.
constexpr int32_t kDefaultHottestRows = 5;

// What a PS node holds.
struct PsNodeStats {
  int32_t task = 0;               // the node's PS task index
  int64_t num_shards = 0;         // == shards.size()
  int64_t bytes = 0;              // sum of the shards' bytes (blocks and optimizer slots)
  std::vector<ShardInfo> shards;  // sorted by name
};

// One worker slot as the coordinator actor sees it (the dashboard's workers table).
struct WorkerSlotStatus {
  int32_t slot = 0;  // the worker's index (networked: its task)
  bool live = false;
  int32_t running = 0;          // closures sent to its worker and not answered yet
  int64_t completed = 0;        // closures its workers answered with a result
  int64_t errors = 0;           // closures its workers answered with an error
  int64_t failures = 0;         // its workers that died
  int64_t starts = 0;           // workers started (or joined) in it; restarts are starts - 1
  int64_t last_closure = -1;    // the id of the latest closure sent to it (-1: none yet)
  std::string last_function;    // that closure's function ("train_step")
  int64_t last_step = -1;       // and the global step it trains (Closure::step; -1: none)
};

// What the coordinator actor knows of its workers.
struct WorkerPoolStatus {
  std::vector<int32_t> live_slots;  // the slot index of every live worker, ascending
  int64_t worker_failures = 0;      // workers that died (killed or crashed)
  int64_t worker_restarts = 0;      // replacements started
  // Networked: why worker processes were refused at join, by task (the latest refusal each).
  std::map<int32_t, std::string> refusals;
  bool run_failed = false;  // a lost PS could not be restored (or the run was aborted)
  // Networked, once the run failed: the worker tasks known to have learned of it (their worker
  // was stopped with the failure and is gone, or a request of theirs was answered with it),
  // ascending.
  std::vector<int32_t> told_of_failure;
  std::vector<WorkerSlotStatus> slots;  // every slot that ever had a worker, ascending
};

// A mirrored replica's place in the ring (actors/mirrored/mirrored_replica_actor.h).
struct MirrorRing {
  int32_t rank = 0;
  int32_t members = 1;
  int64_t batch_size = 1;    // examples per replica per step: a global batch is members * this
  caf::actor next;           // the next replica, or
  std::string next_address;  // (networked) where it is published: the replica connects itself
  JobDescription job;        // the driver's job; a replica of another job refuses the ring
  // The driver's next collective id: everything before it is over (a replica that joins late,
  // a replacement, takes in the ring's next messages rather than dropping them as out of step).
  int64_t next_collective = 0;
  // The previous replica, the one sender whose ring messages this replica takes in (others are
  // dropped): its actor's id and node.
  caf::actor_id previous_id = 0;
  caf::node_id previous_node;
};

// A replica's shares of the steps of a request, one entry per step.
struct MirrorStepResult {
  std::vector<double> loss_sums;  // its mean loss times its examples
  std::vector<int64_t> examples;  // its slice of the global batch (0 when that is empty)
};

// Registers every type above, those of actors/base/core_inspect.h, the actor handles and their
// messages (actors/base/actor_handles.h) and the Tessera error category (actors/base/error.h)
// with `cfg`. Call once per config, before the system is built.
void RegisterTesseraTypes(caf::actor_system_config& cfg);

// For CAF's stringification (logs, to_string of messages).
std::string to_string(ScatterOp op);
std::string to_string(AssignKind kind);
std::string to_string(DType dtype);
std::string to_string(VariableSynchronization sync);
std::string to_string(VariableAggregation aggregation);

// -- inspect overloads -------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardCall& x) {
  return f(caf::meta::type_name("tessera::ShardCall"), x.shard, x.op);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardReply& x) {
  return f(caf::meta::type_name("tessera::ShardReply"), x.error, x.result);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerPoolStatus& x) {
  return f(caf::meta::type_name("tessera::WorkerPoolStatus"), x.live_slots, x.refusals,
           x.worker_failures, x.worker_restarts, x.run_failed, x.told_of_failure, x.slots);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerSlotStatus& x) {
  return f(caf::meta::type_name("tessera::WorkerSlotStatus"), x.slot, x.live, x.running,
           x.completed, x.errors, x.failures, x.starts, x.last_closure, x.last_function,
           x.last_step);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PsNodeStats& x) {
  return f(caf::meta::type_name("tessera::PsNodeStats"), x.task, x.num_shards, x.bytes, x.shards);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorRing& x) {
  return f(caf::meta::type_name("tessera::MirrorRing"), x.rank, x.members, x.batch_size, x.next,
           x.next_address, x.job, x.next_collective, x.previous_id, x.previous_node);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorStepResult& x) {
  return f(caf::meta::type_name("tessera::MirrorStepResult"), x.loss_sums, x.examples);
}

}  // namespace tessera
