#include "actors/mirrored/mirrored_replica_actor.h"

#include <sched.h>

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/mirrored/internal/replica_state.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "tessera/status.h"

namespace tessera {
namespace {

using mirrored_internal::Self;

// Each request goes to its piece of the behaviour (actors/mirrored/internal/replica_state.h).
mirrored_replica_actor::behavior_type ReplicaBehavior(Self self) {
  using namespace mirrored_internal;  // NOLINT(build/namespaces): the pieces, one per request
  return {
      [self](mirror_link_atom, MirrorRing ring) { return JoinRing(self, std::move(ring)); },
      [self](mirror_step_atom, int64_t collective, int64_t step, int64_t count) {
        return RunStepsRequest(self, collective, step, count);
      },
      [self](mirror_run_atom, int64_t collective, const std::string& function,
             const ClosureValues& args) { return RunFunction(self, collective, function, args); },
      [self](mirror_create_atom, const MirroredVariableSpec& spec) {
        return CreateVariable(self, spec);
      },
      [self](mirror_read_atom, const std::string& name) { return ReadSlice(self, name); },
      [self](mirror_load_atom, const TensorSlice& slice) { return LoadSlice(self, slice); },
      [self](mirror_save_atom, const std::string& name, const SaveOp& op) {
        return SaveSlice(self, name, op);
      },
      [self](mirror_eval_atom, int64_t index) { return EvaluateTestBatch(self, index); },
      [self](mirror_probe_atom, int64_t collective, int64_t elements, int64_t rounds) {
        return RunProbe(self, collective, elements, rounds);
      },
      [self](mirror_ring_atom, int64_t collective, RingChunk& chunk) {
        TakeRingMessage(self, collective, chunk);
      },
      [self](mirror_listen_atom) { return AnswerLinkRequest(self); },
      [self](mirror_data_atom, uint64_t key, int64_t collective, RingChunk& chunk) {
        OnLinkData(self, key, collective, chunk);
      },
      [self](mirror_data_atom, uint64_t key, const std::string& why) {
        OnLinkEnded(self, key, why);
      },
      [self](mirror_abort_atom, int64_t collective) { AbortCollective(self, collective); },
  };
}

mirrored_replica_actor::behavior_type ReplicaActor(Self self,
                                                   std::shared_ptr<MirroredReplicaOptions> options,
                                                   std::shared_ptr<MirroredReplica> replica) {
  self->state.options = std::move(*options);
  if (self->state.options.store == nullptr) {
    self->state.options.store = std::make_shared<FileSliceStore>();
  }
  self->state.replica.emplace(std::move(*replica));
  return ReplicaBehavior(self);
}

}  // namespace

int32_t InProcessReplicaCpu(int32_t rank) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (rank < 0 || sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  std::vector<int32_t> cores;
  for (int32_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cores.push_back(cpu);
  }
  if (cores.size() < 2) return -1;
  return cores[static_cast<size_t>(rank) % cores.size()];
}

absl::StatusOr<mirrored_replica_actor> SpawnMirroredReplica(caf::actor_system& system,
                                                            MirroredReplicaOptions options) {
  TESSERA_ASSIGN_OR_RETURN(MirroredReplica replica,
                           MirroredReplica::Create(options.model, options.optimizer));
  // Detached: a replica computes for milliseconds at a stretch and its weights and slots stay in
  // one core's caches; on a thread of its own it never migrates between scheduler threads
  // (measured: its GEMMs and optimizer took ~30% more CPU on the shared scheduler).
  return system.spawn<caf::detached>(ReplicaActor,
                                     std::make_shared<MirroredReplicaOptions>(std::move(options)),
                                     std::make_shared<MirroredReplica>(std::move(replica)));
}

}  // namespace tessera
