// The requests that run collectives on a replica: training steps (each computes this replica's
// gradients on its share of a global batch, all-reduces them and applies the sum), replica
// functions and ring probes.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actors/base/error.h"
#include "actors/mirrored/internal/replica_state.h"
#include "tessera/status.h"

namespace tessera::mirrored_internal {
namespace {

namespace internal_clock {
double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace internal_clock

// How long a collective's start waits for the neighbour to finish reading this replica's last
// collective's buffer before taking another (RingBufferPool::Take): about one segment's copy.
constexpr absl::Duration kBufferPatience = absl::Microseconds(250);

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

}  // namespace

caf::result<MirrorStepResult> RunStepsRequest(Self self, int64_t collective, int64_t step,
                                              int64_t count) {
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
}

caf::result<ClosureValues> RunFunction(Self self, int64_t collective, const std::string& function,
                                       const ClosureValues& args) {
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
}

caf::result<double> RunProbe(Self self, int64_t collective, int64_t elements, int64_t rounds) {
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
}

}  // namespace tessera::mirrored_internal
