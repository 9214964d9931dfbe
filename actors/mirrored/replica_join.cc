// A replica taking its place in a ring (the link request): the place checked, the batch stream
// for the ring's global batches, the replica's core, and the next replica reached (by actor, or
// by address through a detached helper that connects).
#include <sched.h>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/mirrored/internal/replica_state.h"
#include "core/base/logging.h"
#include "core/training/job_description.h"

namespace tessera::mirrored_internal {
namespace {

// Note [Replicas on cores of their own]
// The replicas of a ring in one process compute, then wait for each other's ring messages, in
// lockstep, each waking the other. Left to the kernel, where a woken thread first goes is the
// waker's core, and the replicas ran slower: Fashion-MNIST mirrored 79-86k examples/s against
// 88-92k with each replica bound to a core (interleaved runs), and the worst bench/allreduce runs
// (0.17x memcpy at 4 MiB, 0.34x at 16 MiB, the whole process on one core giving 0.35-0.46x) came
// unbound. So each in-process replica takes a core of its own, round-robin over the cores the
// process may use (InProcessReplicaCpu). Replicas in processes of their own are left where the
// kernel puts them: their host may run anything else.

// Binds this thread (the replica's own: it is detached) to options.cpu; a refusal (a core
// outside a cgroup's set) leaves it where it is, with a warning.
void PinToCpu(ReplicaState& s) {
  s.on_its_cpu = true;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(s.options.cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    Log().warn("mirrored replica: cannot run on core {}: {}", s.options.cpu, std::strerror(errno));
  }
}

}  // namespace

caf::result<bool> JoinRing(Self self, MirrorRing ring) {
  ReplicaState& s = self->state;
  if (ring.members < 1 || ring.members > kMaxRingMembers || ring.rank < 0 ||
      ring.rank >= ring.members || ring.batch_size < 1 ||
      ring.batch_size > kMaxElements / ring.members) {
    return StatusToError(absl::InvalidArgumentError(
        absl::StrCat("a ring place of rank ", ring.rank, " among ", ring.members,
                     " replicas of ", ring.batch_size, " examples each")));
  }
  if (const std::string differences = JobDifferences(ring.job, s.options.job);
      !differences.empty()) {
    return StatusToError(absl::InvalidArgumentError(
        absl::StrCat("this replica runs another job than the driver: ", differences)));
  }
  absl::StatusOr<BatchStream> stream =
      BatchStream::Create(s.options.train, ring.members * ring.batch_size,
                          /*shuffle=*/true, s.options.seed);
  if (!stream.ok()) return StatusToError(stream.status());
  if (s.active.has_value()) {
    Fail(self, s.active->id, absl::AbortedError("the ring changed"));
  }
  s.early.clear();
  s.finished_through = std::max(s.finished_through, ring.next_collective - 1);
  if (s.options.cpu >= 0 && !s.on_its_cpu) PinToCpu(s);
  s.rank = ring.rank;
  s.members = ring.members;
  s.previous_id = ring.previous_id;
  s.previous_node = ring.previous_node;
  s.batch_size = ring.batch_size;
  s.stream.emplace(*std::move(stream));
  s.link_out.reset();  // to the old next replica
  ServeLinkRequestsOfRing(self);
  if (ring.next || ring.next_address.empty()) {
    s.next = caf::actor_cast<mirrored_replica_actor>(ring.next);
    return true;
  }
  if (!s.options.linker) {
    return StatusToError(absl::InvalidArgumentError(
        "a ring by address needs a networked replica (one with a linker)"));
  }
  // Connecting blocks: a detached helper does it, and the reply waits for it.
  auto promise = self->make_response_promise<bool>();
  ReplicaLinker linker = s.options.linker;
  // (An argument, unused: CAF 0.17 dereferences a null argument tuple when there is
  // none.)
  auto helper = self->spawn<caf::detached>(
      [linker](caf::event_based_actor*, int) -> caf::behavior {
        return {[linker](const std::string& address) -> caf::result<caf::actor> {
          absl::StatusOr<caf::actor> next = linker(address);
          if (!next.ok()) return StatusToError(next.status());
          return *next;
        }};
      },
      0);
  self->request(helper, caf::infinite, ring.next_address)
      .then(
          [self, promise, helper,
           address = ring.next_address](const caf::actor& next) mutable {
            self->state.next = caf::actor_cast<mirrored_replica_actor>(next);
            caf::anon_send_exit(helper, caf::exit_reason::user_shutdown);
            OpenRingLink(self, HostOf(address), std::move(promise));
          },
          [promise, helper](caf::error& error) mutable {
            caf::anon_send_exit(helper, caf::exit_reason::user_shutdown);
            promise.deliver(std::move(error));
          });
  return promise;
}

}  // namespace tessera::mirrored_internal
