#include "actors/mirrored/mirrored_replica_actor.h"

#include <sched.h>

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/mirrored/ring_link.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "core/training/evaluation.h"

namespace tessera {
namespace {

namespace internal_clock {
double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace internal_clock

// How far ahead of this replica its neighbour's collectives may be (Note [Collectives between
// replicas]): one is normal, a few tolerate slow links; beyond that the message is a peer out of
// step and is dropped.
constexpr int64_t kMaxCollectivesAhead = 4;

// How long a collective's start waits for the neighbour to finish reading this replica's last
// collective's buffer before taking another (RingBufferPool::Take): about one segment's copy.
constexpr absl::Duration kBufferPatience = absl::Microseconds(250);

// How long a replica that offered a ring link waits for its previous replica to connect.
constexpr absl::Duration kRingLinkAcceptTimeout = absl::Seconds(30);
constexpr absl::Duration kRingLinkConnectTimeout = absl::Seconds(5);

// Note [Ring links]
// Across processes (without TLS) each replica sends its ring messages over a ring link
// (actors/mirrored/ring_link.h) rather than over BASP. Once a replica has reached its next replica by
// address (MirrorRing::next_address), it asks it to listen (listen_atom); the next replica opens a
// receiver on a fresh port, remembers who asked, and answers the port and a random token; the
// asker connects and presents the token. Only the previous replica's request is served: one from
// a peer not (yet) named previous waits for the ring that names it — the next replica may get
// the request before its own MirrorRing — and is refused by any other ring (at most
// kMaxLinkRequests wait), so a stranger can neither open a link that counts nor displace the
// previous replica's. The receiver's reader thread hands each message to its
// replica as (data, key, collective, chunk), where `key` is a random number that never leaves
// the process, so no peer can forge one; the replica takes it in only while the link's asker is
// its previous replica (MirrorRing), exactly as it takes (ring, ...) messages from that replica
// only. A malformed message on the link ends the link and aborts the active collective (DataLoss
// passed around the ring). A replica whose next replica offers no link (TLS, an older peer) or
// whose link cannot be set up or breaks sends over BASP, as in the simulation; a send that fails
// on a broken link fails the collective with Unavailable, and later ones go over BASP. Each
// re-link (a new MirrorRing) drops the replica's outgoing link and sets up a new one; a new listen
// request replaces the incoming one.

// Requests for a ring link from peers not (yet) named the previous replica that wait for a ring
// naming them, at most this many (the oldest refused first).
constexpr size_t kMaxLinkRequests = 4;

// A request for a ring link, from the actor (id and node) that will send over it.
struct LinkRequest {
  caf::actor_id id = 0;
  caf::node_id node;
  caf::typed_response_promise<int32_t, std::string> promise;
};

// One all-reduce in progress (Note [Collectives between replicas]).
struct Collective {
  int64_t id = -1;
  RingBuffer buffer;
  std::optional<RingAllReduce> ring;
  // Called once: OK with the reduced buffer, or the collective's error.
  std::function<void(absl::Status, RingBuffer&)> finish;
};

struct ReplicaState {
  static inline const char* name = "tessera.mirrored_replica";
  MirroredReplicaOptions options;
  std::optional<MirroredReplica> replica;
  // The ring (none until linked).
  int32_t rank = 0;
  int32_t members = 0;
  int64_t batch_size = 0;
  mirrored_replica_actor next;
  caf::actor_id previous_id = 0;  // the previous replica (MirrorRing)
  caf::node_id previous_node;
  bool on_its_cpu = false;            // options.cpu taken (Note [Replicas on cores of their own])
  std::optional<BatchStream> stream;  // global batches of members * batch_size
  std::optional<Collective> active;
  // Ring links (Note [Ring links]): to the next replica, and from whoever asked last, with the
  // key its messages carry.
  std::unique_ptr<RingLinkSender> link_out;
  std::unique_ptr<RingLinkReceiver> link_in;
  uint64_t link_in_key = 0;
  caf::actor_id link_in_id = 0;
  caf::node_id link_in_node;
  std::deque<LinkRequest> link_requests;  // waiting for a ring that names their asker
  std::map<int64_t, std::vector<RingChunk>> early;
  int64_t finished_through = -1;  // the highest collective finished (or aborted) here
  RingBufferPool buffers;         // collectives' buffers (Note [Ring segments read in place])
  ForwardResult eval_result;
};

using Self = mirrored_replica_actor::stateful_pointer<ReplicaState>;

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

void Fail(Self self, int64_t id, const absl::Status& error);

// Ends the active collective (OK or not) and drops messages for collectives up to it.
void Finish(Self self, const absl::Status& status) {
  ReplicaState& s = self->state;
  Collective done = std::move(*s.active);
  s.active.reset();
  s.finished_through = std::max(s.finished_through, done.id);
  s.early.erase(s.early.begin(), s.early.upper_bound(s.finished_through));
  done.ring.reset();  // its share of the buffer: `finish` may start the next collective on it
  done.finish(status, done.buffer);
}

// Sends a ring message of collective `id` to the next replica: over the ring link when there is
// one, else over the actor connection. False when the link broke (the collective has failed).
bool SendChunk(Self self, int64_t id, RingChunk chunk) {
  ReplicaState& s = self->state;
  if (s.link_out == nullptr) {
    self->send(s.next, mirror_ring_atom::value, id, std::move(chunk));
    return true;
  }
  absl::Status sent = s.link_out->Send(id, chunk);
  if (sent.ok()) return true;
  s.link_out.reset();  // later collectives go over the actor connection
  Fail(self, id, Annotate(sent, "to the next replica"));
  return false;
}

// Takes in one ring message for the active collective; false when it failed.
bool Take(Self self, RingChunk chunk) {
  ReplicaState& s = self->state;
  const int64_t id = s.active->id;
  absl::StatusOr<std::optional<RingChunk>> out = s.active->ring->Receive(std::move(chunk));
  if (!out.ok()) {
    Fail(self, id, Annotate(out.status(), "from the previous replica"));
    return false;
  }
  if (out->has_value() && !SendChunk(self, id, std::move(**out))) return false;
  if (s.active->ring->done()) Finish(self, absl::OkStatus());
  return true;
}

// Starts collective `id` over `buffer` (the replica's contribution); `finish` gets the reduced
// buffer. A collective the ring already aborted fails at once.
void StartCollective(Self self, int64_t id, RingBuffer buffer,
                     std::function<void(absl::Status, RingBuffer&)> finish) {
  ReplicaState& s = self->state;
  if (s.active.has_value()) {
    Fail(self, s.active->id,
         absl::AbortedError(absl::StrCat("collective ", s.active->id, " was overtaken by ", id)));
  }
  if (id <= s.finished_through) {
    finish(absl::AbortedError(absl::StrCat("collective ", id, " was aborted by the ring")), buffer);
    return;
  }
  s.active.emplace();
  s.active->id = id;
  s.active->buffer = std::move(buffer);
  s.active->finish = std::move(finish);
  absl::StatusOr<RingAllReduce> ring = RingAllReduce::Create(
      s.rank, s.members, s.active->buffer, ReduceOp::kSum, s.options.ring_chunk_elements);
  if (!ring.ok()) {
    Finish(self, ring.status());
    return;
  }
  s.active->ring.emplace(*std::move(ring));
  for (RingChunk& chunk : s.active->ring->Start()) {
    if (!SendChunk(self, id, std::move(chunk))) return;
  }
  if (auto it = s.early.find(id); it != s.early.end()) {
    std::vector<RingChunk> waiting = std::move(it->second);
    s.early.erase(it);
    for (RingChunk& chunk : waiting) {
      // A chunk past the collective's end (only a peer out of step sends one) is dropped.
      if (!s.active.has_value() || s.active->id != id) break;
      if (!Take(self, std::move(chunk))) return;
    }
  }
  if (s.active.has_value() && s.active->id == id && s.active->ring->done()) {
    Finish(self, absl::OkStatus());
  }
}

// Ends collective `id` (and any earlier one in progress) with `error` here, and passes the abort
// on around the ring, once.
void Fail(Self self, int64_t id, const absl::Status& error) {
  ReplicaState& s = self->state;
  const bool active = s.active.has_value() && s.active->id <= id;
  if (id <= s.finished_through && !active) return;
  if (active) Finish(self, error);
  s.finished_through = std::max(s.finished_through, id);
  s.early.erase(s.early.begin(), s.early.upper_bound(s.finished_through));
  if (s.next) self->send(s.next, mirror_abort_atom::value, id);
}

absl::Status CheckLinked(const ReplicaState& s) {
  if (s.members == 0) {
    return absl::FailedPreconditionError("this replica is not in a ring yet");
  }
  return absl::OkStatus();
}

// This replica's share of global batch `step`: rows [size * rank / members, size * (rank + 1) /
// members), so the shares differ by at most one example (none when the batch is smaller than
// the ring); and the global batch's size.
struct Share {
  std::optional<Batch> batch;
  int64_t global_size = 0;
};

absl::StatusOr<Share> ShareOf(ReplicaState& s, int64_t step) {
  Share share;
  TESSERA_ASSIGN_OR_RETURN(Batch batch,
                           s.stream->GetPart(step, s.rank, s.members, &share.global_size));
  if (batch.size > 0) share.batch = std::move(batch);
  return share;
}

// A request's run of collectives, one after the other (steps, or probe rounds). Each starts once
// the previous one has ended. One that ends inside StartCollective (a ring of one, or the last
// messages already waiting) is followed by the next in RunSteps' / Probe's own loop rather than
// from its callback, so a long request never nests a call per collective.
struct Sequence {
  int64_t collective = 0;  // the first collective's id
  int64_t first = 0;       // steps: the first global batch
  int64_t count = 0;
  int64_t done = 0;
  bool in_call = false;  // inside StartCollective
  bool ended_in_call = false;
};

// Steps [first, first + count) of a request, collectives [collective, collective + count): each
// computes this replica's gradients, all-reduces them and applies the result.
struct StepRun : Sequence {
  MirrorStepResult result;
  caf::typed_response_promise<MirrorStepResult> promise;
};

void RunSteps(Self self, std::shared_ptr<StepRun> run) {
  ReplicaState& s = self->state;
  for (;;) {
    if (run->done == run->count) {
      run->promise.deliver(std::move(run->result));
      return;
    }
    const int64_t collective = run->collective + run->done;
    absl::StatusOr<Share> share = ShareOf(s, run->first + run->done);
    LocalTrainer& trainer = s.replica->trainer();
    // ComputeGradients writes all of the buffer.
    RingBuffer buffer = s.buffers.Take(trainer.packed_gradients_size(), kBufferPatience);
    double loss_sum = 0;
    int64_t examples = 0;
    absl::Status computed = share.status();
    if (computed.ok() && !share->batch.has_value()) {
      std::fill(buffer->begin(), buffer->end(), 0.0f);  // an empty share adds nothing
    } else if (computed.ok()) {
      // Each share's gradient weighs its part of the global batch, so the sum over the replicas
      // is the gradient of the global batch's mean loss, whatever the shares' sizes.
      const Batch& batch = *share->batch;
      const float scale = static_cast<float>(batch.size) / static_cast<float>(share->global_size);
      absl::StatusOr<float> loss = trainer.ComputeGradients(batch, scale, absl::MakeSpan(*buffer));
      computed = loss.status();
      if (loss.ok()) {
        loss_sum = static_cast<double>(*loss) * static_cast<double>(batch.size);
        examples = batch.size;
      }
    }
    if (!computed.ok()) {
      s.buffers.Give(std::move(buffer));
      Fail(self, collective, absl::AbortedError("a replica's step failed"));
      run->promise.deliver(StatusToError(computed));
      return;
    }
    run->in_call = true;
    run->ended_in_call = false;
    StartCollective(self, collective, std::move(buffer),
                    [self, run, loss_sum, examples](absl::Status status, RingBuffer& reduced) {
                      if (status.ok()) {
                        status = self->state.replica->trainer().ApplyPackedGradients(*reduced);
                      }
                      self->state.buffers.Give(std::move(reduced));
                      if (!status.ok()) {
                        run->promise.deliver(StatusToError(status));
                        return;
                      }
                      run->result.loss_sums.push_back(loss_sum);
                      run->result.examples.push_back(examples);
                      ++run->done;
                      if (run->in_call) {
                        run->ended_in_call = true;
                      } else {
                        RunSteps(self, run);
                      }
                    });
    run->in_call = false;
    if (!run->ended_in_call) return;  // the ring goes on; its last message calls back
  }
}

// `count` all-reduces of a buffer of `elements` floats (a ring probe).
struct ProbeRun : Sequence {
  size_t elements = 0;
  double start = 0;
  caf::typed_response_promise<double> promise;
};

void Probe(Self self, std::shared_ptr<ProbeRun> run) {
  for (;;) {
    if (run->done == run->count) {
      run->promise.deliver(internal_clock::Seconds() - run->start);
      return;
    }
    run->in_call = true;
    run->ended_in_call = false;
    StartCollective(self, run->collective + run->done,
                    self->state.buffers.Take(run->elements, kBufferPatience),
                    [self, run](absl::Status status, RingBuffer& reduced) {
                      self->state.buffers.Give(std::move(reduced));
                      if (!status.ok()) {
                        run->promise.deliver(StatusToError(status));
                        return;
                      }
                      ++run->done;
                      if (run->in_call) {
                        run->ended_in_call = true;
                      } else {
                        Probe(self, run);
                      }
                    });
    run->in_call = false;
    if (!run->ended_in_call) return;
  }
}

// The host of a "host:port" (or "[v6 host]:port") address.
std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// Asks the next replica, at `host`, for a ring link and connects to it (Note [Ring links]), then
// answers the ring request: linked either way, over BASP when there is no link.
void OpenRingLink(Self self, std::string host, caf::typed_response_promise<bool> promise) {
  if (self->state.options.ring_link_bind.empty()) {
    promise.deliver(true);
    return;
  }
  self->request(self->state.next, std::chrono::seconds(10), mirror_listen_atom::value)
      .then(
          [self, host, promise](int32_t port, const std::string& token) mutable {
            absl::StatusOr<std::unique_ptr<RingLinkSender>> link =
                port > 0 && port <= 65535
                    ? RingLinkSender::Connect(host, static_cast<uint16_t>(port), token,
                                              kRingLinkConnectTimeout)
                    : absl::InvalidArgumentError(absl::StrCat("ring link: port ", port));
            if (link.ok()) {
              self->state.link_out = *std::move(link);
              Log().info("ring link to the next replica at {}:{}", host, port);
            } else {
              Log().warn(
                  "no ring link to the next replica ({}): ring messages go over the "
                  "actor connection",
                  link.status().message());
            }
            promise.deliver(true);
          },
          [promise](caf::error&) mutable { promise.deliver(true); });
}

// Opens the incoming ring link `request` asked for and answers it with the port and token
// (Note [Ring links]); it replaces the link from whoever asked before.
void ServeLinkRequest(Self self, LinkRequest request) {
  ReplicaState& s = self->state;
  s.link_in.reset();
  std::random_device device;
  const uint64_t key = (uint64_t{device()} << 32) | device();
  const caf::actor_addr me = self->address();
  absl::StatusOr<std::unique_ptr<RingLinkReceiver>> link = RingLinkReceiver::Listen(
      s.options.ring_link_bind, s.options.ring_chunk_elements, kRingLinkAcceptTimeout,
      [me, key](int64_t collective, RingChunk chunk) {
        if (caf::actor replica = caf::actor_cast<caf::actor>(me)) {
          caf::anon_send(replica, mirror_data_atom::value, key, collective, std::move(chunk));
        }
      },
      [me, key](absl::Status why) {
        caf::actor replica = caf::actor_cast<caf::actor>(me);
        if (replica && absl::IsDataLoss(why)) {
          caf::anon_send(replica, mirror_data_atom::value, key, std::string(why.message()));
        }
      });
  if (!link.ok()) {
    request.promise.deliver(StatusToError(link.status()));
    return;
  }
  s.link_in = *std::move(link);
  s.link_in_key = key;
  s.link_in_id = request.id;
  s.link_in_node = request.node;
  request.promise.deliver(static_cast<int32_t>(s.link_in->port()), s.link_in->token());
}

// After a new ring: the incoming link stays only if the previous replica asked for it; a waiting
// request of the previous replica's is served, every other one refused.
void ServeLinkRequestsOfRing(Self self) {
  ReplicaState& s = self->state;
  if (s.link_in != nullptr &&
      (s.link_in_id != s.previous_id || s.link_in_node != s.previous_node)) {
    s.link_in.reset();
  }
  std::deque<LinkRequest> waiting = std::move(s.link_requests);
  s.link_requests.clear();
  for (LinkRequest& request : waiting) {
    if (request.id == s.previous_id && request.node == s.previous_node) {
      ServeLinkRequest(self, std::move(request));
    } else {
      request.promise.deliver(StatusToError(
          absl::PermissionDeniedError("a ring link for a replica that is not the previous one")));
    }
  }
}

// Takes in a ring message of `collective` from the previous replica (over either transport).
void OnRingChunk(Self self, int64_t collective, RingChunk& chunk) {
  ReplicaState& s = self->state;
  if (s.active.has_value() && s.active->id == collective) {
    Take(self, std::move(chunk));
    return;
  }
  if (collective <= s.finished_through) {
    // Only a peer out of step (or one not told of an abort yet) sends for a collective
    // this replica has finished: pass the abort on.
    if (s.next) self->send(s.next, mirror_abort_atom::value, collective);
    return;
  }
  if (collective > s.finished_through + kMaxCollectivesAhead) return;  // out of step
  // A healthy neighbour is at most one collective ahead, a buffer's worth; more is a peer
  // out of step, and the collective it floods is aborted rather than held in memory.
  int64_t waiting = chunk.values.size();
  for (const auto& [id, chunks] : s.early) {
    for (const RingChunk& held : chunks) waiting += held.values.size();
  }
  const int64_t limit =
      std::max<int64_t>(2 * s.replica->trainer().packed_gradients_size(), kMaxProbeElements);
  if (waiting > limit) {
    Fail(self, collective,
         absl::ResourceExhaustedError(absl::StrCat("collective ", collective,
                                                   ": the previous replica sent more than ", limit,
                                                   " floats ahead of this one")));
    return;
  }
  s.early[collective].push_back(std::move(chunk));
}

mirrored_replica_actor::behavior_type ReplicaBehavior(Self self) {
  return {
      [self](mirror_link_atom, MirrorRing ring) -> caf::result<bool> {
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
      },
      [self](mirror_step_atom, int64_t collective, int64_t step,
             int64_t count) -> caf::result<MirrorStepResult> {
        ReplicaState& s = self->state;
        if (absl::Status linked = CheckLinked(s); !linked.ok()) return StatusToError(linked);
        if (count < 1 || count > kMaxStepsPerRequest) {
          return StatusToError(absl::InvalidArgumentError(
              absl::StrCat("a request for ", count, " steps (1 to ", kMaxStepsPerRequest, ")")));
        }
        auto promise = self->make_response_promise<MirrorStepResult>();
        auto run = std::make_shared<StepRun>();
        run->collective = collective;
        run->first = step;
        run->count = count;
        run->promise = promise;
        RunSteps(self, run);
        return promise;
      },
      [self](mirror_run_atom, int64_t collective, const std::string& function,
             const ClosureValues& args) -> caf::result<ClosureValues> {
        ReplicaState& s = self->state;
        if (absl::Status linked = CheckLinked(s); !linked.ok()) return StatusToError(linked);
        const MirroredFunctions* functions = s.options.functions.get();
        auto fn =
            functions == nullptr ? MirroredFunctions::const_iterator() : functions->find(function);
        if (functions == nullptr || fn == functions->end()) {
          Fail(self, collective, absl::NotFoundError("no such function"));
          return StatusToError(absl::NotFoundError(
              absl::StrCat("no replica function '", function, "' is registered")));
        }
        MirroredReplicaContext ctx(*s.replica, s.rank, s.members);
        absl::StatusOr<ClosureValues> result = fn->second(ctx, args);
        absl::StatusOr<std::vector<float>> packed =
            result.ok() ? s.replica->PackWrites(ctx.held_writes(), s.rank, s.members)
                        : absl::StatusOr<std::vector<float>>(result.status());
        if (!packed.ok()) {
          Fail(self, collective, absl::AbortedError("a replica's function failed"));
          return StatusToError(packed.status());
        }
        auto promise = self->make_response_promise<ClosureValues>();
        StartCollective(
            self, collective, std::make_shared<std::vector<float>>(*std::move(packed)),
            [self, promise, result = *std::move(result), writes = std::move(ctx.held_writes())](
                absl::Status status, RingBuffer& reduced) mutable {
              if (status.ok()) status = self->state.replica->ApplyWrites(writes, *reduced);
              if (!status.ok()) {
                promise.deliver(StatusToError(status));
              } else {
                promise.deliver(std::move(result));
              }
            });
        return promise;
      },
      [self](mirror_create_atom, const MirroredVariableSpec& spec) -> caf::result<bool> {
        absl::Status created = self->state.replica->CreateVariable(spec);
        if (!created.ok()) return StatusToError(created);
        return true;
      },
      [self](mirror_read_atom, const std::string& name) -> caf::result<TensorSlice> {
        absl::StatusOr<TensorSlice> slice = self->state.replica->Slice(name);
        if (!slice.ok()) return StatusToError(slice.status());
        return *std::move(slice);
      },
      [self](mirror_load_atom, const TensorSlice& slice) -> caf::result<bool> {
        absl::Status loaded = self->state.replica->Load(slice);
        if (!loaded.ok()) return StatusToError(loaded);
        return true;
      },
      [self](mirror_eval_atom, int64_t index) -> caf::result<ClosureValues> {
        ReplicaState& s = self->state;
        if (index < 0) {
          return StatusToError(absl::OutOfRangeError(absl::StrCat("test batch ", index)));
        }
        ClosureValues out;
        if (index >= (s.options.test.size() + kEvalBatchSize - 1) / kEvalBatchSize) {
          out.Set("examples", int64_t{0});  // past the test set: nothing
          return out;
        }
        const int64_t begin = index * kEvalBatchSize;
        const int64_t count = std::min(kEvalBatchSize, s.options.test.size() - begin);
        absl::StatusOr<Batch> batch = s.options.test.Slice(begin, count);
        if (!batch.ok()) return StatusToError(batch.status());
        absl::Status forward = s.replica->trainer().Forward(*batch, s.eval_result);
        if (!forward.ok()) return StatusToError(forward);
        if (!s.eval_result.loss.has_value()) {
          return StatusToError(absl::InvalidArgumentError("the test set has no labels"));
        }
        out.Set("loss", static_cast<double>(*s.eval_result.loss));
        out.Set("examples", count);
        out.Set("labels", Tensor::Copy(batch->labels.view()));
        EvalAccumulator names(s.replica->trainer().model());
        if (const Tensor* logits = names.Logits(s.eval_result.outputs); logits != nullptr) {
          out.Set("logits", Tensor::Copy(logits->view()));
        }
        return out;
      },
      [self](mirror_probe_atom, int64_t collective, int64_t elements,
             int64_t rounds) -> caf::result<double> {
        if (absl::Status linked = CheckLinked(self->state); !linked.ok()) {
          return StatusToError(linked);
        }
        if (elements < 0 || elements > kMaxProbeElements || rounds < 1 ||
            rounds > kMaxStepsPerRequest) {
          return StatusToError(absl::InvalidArgumentError(
              absl::StrCat("a ring probe of ", rounds, " rounds of ", elements, " floats (at most ",
                           kMaxStepsPerRequest, " rounds of ", kMaxProbeElements, ")")));
        }
        auto promise = self->make_response_promise<double>();
        auto run = std::make_shared<ProbeRun>();
        run->collective = collective;
        run->count = rounds;
        run->elements = static_cast<size_t>(elements);
        run->start = internal_clock::Seconds();
        run->promise = promise;
        Probe(self, run);
        return promise;
      },
      [self](mirror_ring_atom, int64_t collective, RingChunk& chunk) {
        const ReplicaState& s = self->state;
        if (const caf::strong_actor_ptr& sender = self->current_sender();
            sender == nullptr || sender->id() != s.previous_id ||
            sender->node() != s.previous_node) {
          return;  // not the previous replica's
        }
        OnRingChunk(self, collective, chunk);
      },
      [self](mirror_listen_atom) -> caf::result<int32_t, std::string> {
        ReplicaState& s = self->state;
        if (s.options.ring_link_bind.empty()) {
          return StatusToError(absl::FailedPreconditionError(
              "this replica takes ring messages over the actor connection only"));
        }
        const caf::strong_actor_ptr& sender = self->current_sender();
        if (sender == nullptr) {
          return StatusToError(absl::InvalidArgumentError("a ring link asked for anonymously"));
        }
        // Before the promise, which takes the sender out of the current message.
        LinkRequest request{sender->id(), sender->node(), {}};
        auto promise = self->make_response_promise<int32_t, std::string>();
        request.promise = promise;
        if (request.id == s.previous_id && request.node == s.previous_node) {
          ServeLinkRequest(self, std::move(request));
        } else {
          // Maybe the previous replica of a ring this replica has not been told of yet.
          if (s.link_requests.size() == kMaxLinkRequests) {
            s.link_requests.front().promise.deliver(StatusToError(
                absl::ResourceExhaustedError("too many ring link requests from strangers")));
            s.link_requests.pop_front();
          }
          s.link_requests.push_back(std::move(request));
        }
        return promise;
      },
      [self](mirror_data_atom, uint64_t key, int64_t collective, RingChunk& chunk) {
        const ReplicaState& s = self->state;
        if (s.link_in == nullptr || key != s.link_in_key || s.link_in_id != s.previous_id ||
            s.link_in_node != s.previous_node) {
          return;  // an old link's, or not from the previous replica
        }
        OnRingChunk(self, collective, chunk);
      },
      [self](mirror_data_atom, uint64_t key, const std::string& why) {
        ReplicaState& s = self->state;
        if (s.link_in == nullptr || key != s.link_in_key) return;
        Log().warn("the ring link from the previous replica ended: {}", why);
        if (s.active.has_value()) {
          Fail(self, s.active->id,
               absl::DataLossError(absl::StrCat("from the previous replica: ", why)));
        }
      },
      [self](mirror_abort_atom, int64_t collective) {
        Fail(self, collective,
             absl::AbortedError(absl::StrCat("collective ", collective,
                                             " was aborted: a replica failed or left the ring")));
      },
  };
}

mirrored_replica_actor::behavior_type ReplicaActor(Self self,
                                                   std::shared_ptr<MirroredReplicaOptions> options,
                                                   std::shared_ptr<MirroredReplica> replica) {
  self->state.options = std::move(*options);
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

namespace wire {

caf::error SaveRingValues(caf::serializer& sink, const RingValues& values) {
  if (auto err = SaveShape(sink, Shape{values.size()})) return err;
  if (values.size() == 0) return caf::none;
  return sink.apply_raw(static_cast<size_t>(values.size()) * sizeof(float),
                        const_cast<float*>(values.span().data()));
}

caf::error LoadRingValues(caf::deserializer& source, RingValues& values) {
  Tensor loaded;
  if (auto err = LoadTensor(source, loaded)) return err;
  if (loaded.shape().rank() != 1) {
    return StatusToError(absl::DataLossError(absl::StrCat(
        "a ring message carries values of shape ", loaded.shape().ToString(), ", not a vector")));
  }
  values = RingValues::Own(std::move(loaded));
  return caf::none;
}

}  // namespace wire

void RegisterMirroredTypes(caf::actor_system_config& cfg) {
  cfg.add_message_type<MirrorRing>("tessera::MirrorRing");
  cfg.add_message_type<MirrorStepResult>("tessera::MirrorStepResult");
  cfg.add_message_type<RingChunk>("tessera::RingChunk");
  cfg.add_message_type<MirroredVariableSpec>("tessera::MirroredVariableSpec");
  cfg.add_message_type<VariableSynchronization>("tessera::VariableSynchronization");
  cfg.add_message_type<VariableAggregation>("tessera::VariableAggregation");
  cfg.add_message_type<mirrored_replica_actor>("tessera::mirrored_replica_actor");
}

std::string to_string(VariableSynchronization sync) {
  return std::string(SynchronizationName(sync));
}
std::string to_string(VariableAggregation aggregation) {
  return std::string(AggregationName(aggregation));
}

}  // namespace tessera
