#include "actors/ps/shard_actor.h"

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "actors/base/error.h"
#include "core/base/logging.h"
#include "core/ps/shard_op.h"
#include "schema/checkpoint/checkpoint_io.h"

namespace tessera {
namespace {

using ShardPointer = shard_actor::stateful_pointer<ShardActorState>;

// Writes one shard's copy for a SaveOp::in_background (Note [Checkpoints without pausing],
// coordinator/checkpoint/save_restore.cc) on a thread of its own, answers the save's requester (the
// shard delegates the request to it) and exits.
using snapshot_writer = caf::typed_actor<caf::replies_to<write_atom>::with<ShardOpResult>>;

snapshot_writer::behavior_type SnapshotWriter(snapshot_writer::pointer self,
                                              std::shared_ptr<const ShardSnapshot> snapshot,
                                              SaveOp op, std::shared_ptr<const SliceStore> store) {
  return {
      [self, snapshot, op, store](write_atom) -> caf::result<ShardOpResult> {
        self->quit();
        absl::StatusOr<SavedSlice> saved = WriteSnapshot(*snapshot, op, *store);
        if (!saved.ok()) return StatusToError(saved.status());
        return ShardOpResult(*std::move(saved));
      },
  };
}

std::string NameOf(const ShardState& shard) {
  const ShardSpec& spec = shard.spec();
  return ShardName(spec.variable, spec.shard_index, spec.num_shards);
}

// Runs what waited for the backup, and the acknowledgements held since a lost one, in order, and
// forgets them: the shard was given its next backup (or none).
void ReleaseAwaiting(ShardActorState& state) {
  std::deque<std::function<void()>> held;
  held.swap(state.held_acknowledgements);
  std::deque<ShardActorState::Awaiting> awaiting;
  awaiting.swap(state.awaiting_backup);
  state.backup_lost = false;
  for (auto& acknowledge : held) acknowledge();
  for (auto& entry : awaiting) entry.then();
}

// Note [A lost backup is struck before the primary acknowledges alone] (shard_actor.h): the
// shard drops its backup, which failed for reason `why`, holds the acknowledgements that waited
// for it (a rebuild's part learns at once), and tells whoever gave it the backup. Cancelled: the
// backup was stopped in order (its node shut down), which is said at info, not warned of.
void LoseBackup(ShardPointer self, const absl::Status& why) {
  ShardActorState& state = self->state;
  if (!state.backup) return;
  self->demonitor(state.backup);
  caf::actor lost = std::move(state.backup);
  state.backup = nullptr;
  state.via = nullptr;
  ++state.backup_epoch;
  state.backup_lost = true;
  Log().log(absl::IsCancelled(why) ? spdlog::level::info : spdlog::level::warn,
            "shard {} lost its backup ({}); its changes are acknowledged once the coordinator has "
            "struck that backup",
            NameOf(*state.shard), why.message());
  std::deque<ShardActorState::Awaiting> awaiting;
  awaiting.swap(state.awaiting_backup);
  for (auto& entry : awaiting) {
    if (entry.acknowledges) {
      state.held_acknowledgements.push_back(std::move(entry.then));
    } else {
      entry.then();
    }
  }
  if (state.backup_giver) {
    self->send(state.backup_giver, backup_lost_atom::value, NameOf(*state.shard), lost);
  }
}

// A promise of `answer`, delivered once the shard is given its next backup (Note [A lost backup
// is struck before the primary acknowledges alone]).
template <class T>
caf::result<T> HoldAcknowledgement(ShardPointer self, T answer) {
  auto promise = self->make_response_promise<T>();
  self->state.held_acknowledgements.push_back(
      [promise, held = std::make_shared<T>(std::move(answer))]() mutable {
        promise.deliver(std::move(*held));
      });
  return promise;
}

// The most a part of the state sent to a new backup holds (RestorePart): far below
// --max_message_bytes's default (1 GiB), so a shard of any size can be rebuilt; a limit set below
// it makes rebuilds fail (the shard goes on without a backup, saying why).
constexpr int64_t kRebuildPartBytes = int64_t{32} << 20;

// What goes to the backup in place of an update the shard had applied already (an update of a
// closure run again): nothing to apply — the backup had it before it was acknowledged, or took
// the shard's state after — but its answer comes after every change sent before it, so the
// acknowledgement still waits for those (Note [Shard backups]).
ShardOp AppliedAlready() { return InfoOp{}; }

// Sends `ops`, which the shard has just applied, to its backup; `then` runs once the backup has
// applied them too (the backup answers in order). When the backup fails first, `then` runs once
// the shard is given its next backup if it `acknowledges` a client, else (a rebuild's next step)
// at once.
void ForwardToBackup(ShardPointer self, std::vector<ShardOp> ops, std::function<void()> then,
                     bool acknowledges = true) {
  ShardActorState& state = self->state;
  state.awaiting_backup.push_back({std::move(then), acknowledges});
  const size_t sent = ops.size();
  const uint64_t epoch = state.backup_epoch;
  auto applied = [self, sent, epoch](std::vector<ShardReply>& replies) {
    ShardActorState& state = self->state;
    if (epoch != state.backup_epoch) return;  // released already
    if (replies.size() != sent) {
      return LoseBackup(self, absl::DataLossError("it answered a partial batch"));
    }
    for (const ShardReply& reply : replies) {
      if (reply.error) return LoseBackup(self, ErrorToStatus(reply.error));
    }
    std::function<void()> then = std::move(state.awaiting_backup.front().then);
    state.awaiting_backup.pop_front();
    then();
  };
  auto failed = [self, epoch](caf::error& err) {
    if (epoch == self->state.backup_epoch) LoseBackup(self, ErrorToStatus(err));
  };
  if (state.via) {  // Note [A node's forwards travel together] (actors/ps/forward_link.h)
    self->request(state.via, caf::infinite, forward_atom::value, state.backup, std::move(ops))
        .then(std::move(applied), std::move(failed));
  } else {
    self->request(caf::actor_cast<shard_actor>(state.backup), caf::infinite, std::move(ops))
        .then(std::move(applied), std::move(failed));
  }
}

// Sends `backup` the shard's part from row `begin` (RestorePart), then, once the backup applied
// it, the next one, and so on (Note [Shard backups]); `done` learns whether the backup took
// them all (false: it was dropped or replaced on the way).
void SendStateParts(ShardPointer self, const caf::actor& backup, int64_t begin, int64_t part_rows,
                    std::function<void(bool)> done) {
  const ShardState& shard = *self->state.shard;
  const int64_t rows = shard.spec().rows;  // 1 for a scalar
  std::vector<ShardOp> ops;
  ops.emplace_back(RestorePart(shard, begin, part_rows));
  const int64_t next = begin + part_rows;
  ForwardToBackup(
      self, std::move(ops),
      [self, backup, next, rows, part_rows, done]() {
        if (self->state.backup != backup) return done(false);
        if (next >= rows) return done(true);
        SendStateParts(self, backup, next, part_rows, done);
      },
      /*acknowledges=*/false);
}

// The handlers, over the state's shard (or its build error).
shard_actor::behavior_type Serve(ShardPointer self, std::shared_ptr<const SliceStore> store) {
  self->state.store = store != nullptr ? std::move(store) : std::make_shared<FileSliceStore>();
  self->set_down_handler([self](caf::down_msg& down) {
    if (self->state.backup && down.source == self->state.backup.address()) {
      const std::string reason = self->system().render(down.reason);
      LoseBackup(self, OrderlyExit(down.reason)
                           ? absl::CancelledError(absl::StrCat("it was shut down: ", reason))
                           : absl::UnavailableError(absl::StrCat("it went down: ", reason)));
    }
  });
  // The handlers capture the state by reference: it lives in the actor, which outlives the
  // behaviour.
  ShardActorState& state = self->state;
  return {
      [self, &state](ShardOp& op) -> caf::result<ShardOpResult> {
        if (state.shard == nullptr) return StatusToError(state.build_error);
        if (auto* save = std::get_if<SaveOp>(&op); save != nullptr && save->in_background) {
          // The snapshot is this op's cut: later ops in the mailbox change the shard, not what
          // the writer reads (Note [Copy-on-write snapshots], core/ps/cow_snapshot.h).
          std::shared_ptr<const ShardSnapshot> snapshot = StartSnapshot(*state.shard);
          auto writer =
              self->spawn<caf::detached>(SnapshotWriter, std::move(snapshot), *save, state.store);
          return self->delegate(writer, write_atom::value);
        }
        // Whether the op's answer waits for a backup: shards without a backup never ask.
        const bool changes = (state.backup || state.backup_lost) && ChangesShard(op);
        std::optional<ShardOp> forwarded;
        if (state.backup && changes) forwarded = op;
        const int64_t before = state.shard->version();
        absl::StatusOr<ShardOpResult> result =
            ApplyShardOp(*state.shard, std::move(op), state.store.get());
        if (!result.ok()) return StatusToError(result.status());
        if (state.backup_lost && changes) return HoldAcknowledgement(self, *std::move(result));
        if (!forwarded.has_value()) return *std::move(result);
        if (state.shard->version() == before) forwarded = AppliedAlready();
        // Note [Shard backups]: acknowledged once the backup has it.
        auto promise = self->make_response_promise<ShardOpResult>();
        std::vector<ShardOp> ops;
        ops.push_back(*std::move(forwarded));
        ForwardToBackup(
            self, std::move(ops),
            [promise, answer = std::make_shared<ShardOpResult>(*std::move(result))]() mutable {
              promise.deliver(std::move(*answer));
            });
        return promise;
      },
      [self, &state](std::vector<ShardOp>& ops) -> caf::result<std::vector<ShardReply>> {
        std::vector<ShardReply> replies(ops.size());
        std::vector<ShardOp> forwarded;
        bool changed = false;
        for (size_t k = 0; k < ops.size(); ++k) {
          if (state.shard == nullptr) {
            replies[k].error = StatusToError(state.build_error);
            continue;
          }
          const bool changes = (state.backup || state.backup_lost) && ChangesShard(ops[k]);
          std::optional<ShardOp> copy;
          if (state.backup && changes) copy = ops[k];
          const int64_t before = state.shard->version();
          absl::StatusOr<ShardOpResult> result =
              ApplyShardOp(*state.shard, std::move(ops[k]), state.store.get());
          if (result.ok()) {
            changed = changed || changes;
            replies[k].result = *std::move(result);
            if (copy.has_value() && state.shard->version() == before) copy = AppliedAlready();
            if (copy.has_value()) forwarded.push_back(*std::move(copy));
          } else {
            replies[k].error = StatusToError(result.status());
          }
        }
        if (state.backup_lost && changed) return HoldAcknowledgement(self, std::move(replies));
        if (forwarded.empty()) return replies;
        auto promise = self->make_response_promise<std::vector<ShardReply>>();
        ForwardToBackup(
            self, std::move(forwarded),
            [promise, answers = std::make_shared<std::vector<ShardReply>>(
                          std::move(replies))]() mutable { promise.deliver(std::move(*answers)); });
        return promise;
      },
      [self, &state](backup_atom, caf::actor& backup, caf::actor& via,
                     bool send_state) -> caf::result<int64_t> {
        if (state.shard == nullptr) return StatusToError(state.build_error);
        if (backup == caf::actor_cast<caf::actor>(self)) {
          return StatusToError(absl::InvalidArgumentError(
              absl::StrCat("shard ", NameOf(*state.shard), " cannot be its own backup")));
        }
        // What waited for the old backup is acknowledged (that backup got it, or is gone), and
        // so is what was held since a lost one: whoever gave this backup knows the old one is no
        // more (Note [A lost backup is struck before the primary acknowledges alone]). A rebuild
        // of the old one under way stops, seeing the new backup.
        state.backup_giver = caf::actor_cast<backup_watcher>(self->current_sender());
        if (state.backup) self->demonitor(state.backup);
        ++state.backup_epoch;
        state.backup = backup;
        state.via = backup ? caf::actor_cast<forward_link>(via) : forward_link();
        ReleaseAwaiting(state);
        const int64_t version = state.shard->version();
        if (!backup) return version;
        // A backup that goes down is noticed even while nothing waits for it, and what waits
        // for one is acknowledged when it does (a lost connection answers no request).
        self->monitor(backup);
        if (!send_state) return version;
        // The state, part by part (Note [Shard backups]).
        auto promise = self->make_response_promise<int64_t>();
        SendStateParts(self, backup, 0, RestorePartRows(*state.shard, kRebuildPartBytes),
                       [self, promise, backup, version](bool taken) mutable {
                         if (!taken) {
                           promise.deliver(StatusToError(absl::UnavailableError(
                               absl::StrCat("shard ", NameOf(*self->state.shard),
                                            ": the new backup did not take its state"))));
                           return;
                         }
                         promise.deliver(version);
                       });
        return promise;
      },
  };
}

// ShardState::Create, with running out of memory as an error rather than an exception that
// would kill the actor without saying why.
absl::StatusOr<ShardState> Build(const ShardSpec& spec) {
  try {
    return ShardState::Create(spec);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ShardName(spec.variable, spec.shard_index, spec.num_shards),
        ": cannot allocate the block of ", ShardBlockShape(spec).ToString(),
        " and its optimizer slots"));
  }
}

}  // namespace

shard_actor::behavior_type ShardActor(ShardPointer self, std::shared_ptr<ShardState> shard,
                                      std::shared_ptr<const SliceStore> store) {
  self->state.shard = std::move(shard);
  return Serve(self, std::move(store));
}

shard_actor::behavior_type BuildingShardActor(ShardPointer self, ShardSpec spec,
                                              std::shared_ptr<const SliceStore> store) {
  absl::StatusOr<ShardState> built = Build(spec);
  if (built.ok()) {
    self->state.shard = std::make_shared<ShardState>(*std::move(built));
  } else {
    self->state.build_error = built.status();
  }
  return Serve(self, std::move(store));
}

shard_actor SpawnShard(caf::actor_system& system, ShardState shard,
                       std::shared_ptr<const SliceStore> store) {
  return system.spawn(ShardActor, std::make_shared<ShardState>(std::move(shard)),
                      std::move(store));
}

}  // namespace tessera
