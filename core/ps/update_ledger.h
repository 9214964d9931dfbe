// UpdateId and UpdateLedger: how a shard applies each closure's update exactly once.
//
// Note [Exactly-once updates]
// A closure runs again when its worker dies or cannot reach a shard
// (core/scheduling/closure_queue.h), and its first attempt may already have updated some shards:
// before, a re-run applied those gradients (or assign_adds, scatters) twice. Now every update a
// worker sends for a closure carries an UpdateId — the issuing queue, the closure, and the update's
// sequence number among the updates this closure sends to that one shard — and an attempt that runs
// again names its updates exactly as the first did (the same function on the same batch sends each
// shard the same updates in the same order). A shard remembers the ids it applied in an
// UpdateLedger and answers a repeat as applied without applying it, so whichever attempt reaches a
// shard first updates it and every later one is dropped there: exactly one application per closure
// and shard.
//
// The ledger stays small without guessing a time window: every closure carries, from the moment it
// was dispatched, the lowest id its queue had not yet resolved (`resolved_below`); closures below
// it finished and never run again, so a shard forgets their ids as soon as any update brings it a
// newer mark. What it holds is therefore the updates of closures in flight. Ids from another queue
// (another coordinator) are kept apart; the few most recently used queues are remembered. A
// coordinator started again for the same run shares its predecessor's queue and names the same
// step's closure alike (Note [Closure ids that survive a restart],
// core/scheduling/closure_queue.h), so its re-runs are dropped where applied. Two limits, both
// counted in `evicted`: a queue past kMaxRememberedQueues loses its ids, and a queue whose marks
// cannot advance (one closure re-run for ever while thousands of others finish) keeps at most
// kMaxRememberedUpdates ids, dropping the oldest. An evicted id's re-run applies again (at least
// once, as before).
//
// A stale attempt whose update arrives after its closure was resolved and forgotten (a worker
// cut off yet alive, delivering long after the re-run finished) is applied: forgetting by mark
// keeps updates a replica function sent without waiting for their acknowledgement, which a rule
// of "drop anything below the mark" would lose silently.
//
// A restore replaces what the ledger vouched for, so it clears it: a run resumed from a
// checkpoint re-applies its updates. A restore that seeds a backup with its primary's state
// carries the primary's ledger too (RestoreOp::ledger), which the backup takes instead: a
// backup rebuilt mid-run and later promoted still drops the re-run updates its primary had
// applied before the rebuild (Note [Shard backups], actors/ps/shard_actor.h).
//
// Thread-safety: none; a ledger belongs to one ShardState.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// The identity of one update a closure sends to one shard. `closure` 0 is untagged: an update
// from the driver or a test, always applied.
struct UpdateId {
  uint64_t queue = 0;          // the ClosureQueue that issued the closure (random per queue)
  int64_t closure = 0;         // the closure's id in that queue
  int64_t sequence = 0;        // this update's number among the closure's updates to the shard
  int64_t resolved_below = 0;  // every closure of the queue below this id was resolved

  bool tagged() const { return closure != 0; }
};

// The sending side: names the updates one attempt of a closure sends, numbering them per shard
// in the order sent, so that every attempt names each of its updates alike.
class UpdateNamer {
 public:
  UpdateNamer(uint64_t queue, int64_t closure, int64_t resolved_below)
      : queue_(queue), closure_(closure), resolved_below_(resolved_below) {}
  // The id of the closure's next update to shard `shard` of variable `variable`.
  UpdateId Next(const std::string& variable, int64_t shard);

 private:
  uint64_t queue_;
  int64_t closure_;
  int64_t resolved_below_;
  std::map<std::pair<std::string, int64_t>, int64_t> sent_;  // updates sent, per shard
};

// What a ledger remembers of one queue, as a value (UpdateLedger::Remembered).
struct RememberedQueue {
  uint64_t queue = 0;
  int64_t resolved_below = 0;
  std::vector<std::pair<int64_t, int64_t>> applied;  // (closure, sequence), ascending
};

class UpdateLedger {
 public:
  static constexpr int kMaxRememberedQueues = 8;
  static constexpr int64_t kMaxRememberedUpdates = 1 << 16;

  // Whether the update `id` names was applied already (always false for an untagged id). Also
  // takes in its queue's mark, forgetting the ids of resolved closures.
  bool Applied(const UpdateId& id);
  // Remembers a tagged `id` as applied (untagged ids are ignored).
  void Record(const UpdateId& id);
  // Forgets everything (a restore).
  void Clear() { queues_.clear(); }
  // What the ledger remembers, the least recently used queue first.
  std::vector<RememberedQueue> Remembered() const;
  // Each remembered queue and its mark, (queue, resolved_below), in the order of Remembered.
  std::vector<std::pair<uint64_t, int64_t>> Marks() const;
  // Remembers exactly `queues` (as Remembered gives them, from any source): what lies beyond the
  // limits — the first queues past kMaxRememberedQueues, the lowest ids past
  // kMaxRememberedUpdates — is left out and counted as evicted, and ids below their queue's
  // mark are dropped.
  void Replace(const std::vector<RememberedQueue>& queues);

  // Ids remembered now, over every queue.
  int64_t size() const;
  // Ids forgotten before their closure was resolved (the limits above).
  int64_t evicted() const { return evicted_; }

 private:
  struct Queue {
    uint64_t id = 0;
    int64_t resolved_below = 0;
    std::set<std::pair<int64_t, int64_t>> applied;  // (closure, sequence)
    uint64_t last_used = 0;
  };
  // The entry of queue `id`, made (evicting the least recently used) when missing.
  Queue& Find(uint64_t id);
  // Every queue, the least recently used first.
  std::vector<const Queue*> LeastRecentlyUsedFirst() const;

  std::vector<Queue> queues_;
  uint64_t clock_ = 0;
  int64_t evicted_ = 0;
};

}  // namespace tessera
