// The mirrored replica actor (actors/mirrored/mirrored_replica_actor.h) through its typed
// messages alone: a replica spawned in process, alone or in a ring of two handed each other's
// actors, its variables, functions, evaluation and the errors its header lists.
//
// A replica runs on a thread of its own (detached), which CAF's testing scheduler does not drive,
// so these tests use a small threaded system and blocking requests; every wait is bounded by a
// generous request timeout that only a hang reaches.
#include "actors/mirrored/mirrored_replica_actor.h"

#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "tessera/workloads/fashion_mnist.h"
#include "tessera/workloads/reference_models.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::CheckOk;
using testing::ValueOrDie;

constexpr auto kReplyTimeout = std::chrono::seconds(30);  // only a hang waits this long

struct ActorSystem {
  ActorSystem() {
    RegisterTesseraTypes(config);
    config.set("scheduler.max-threads", size_t{2});
    config.set("logger.file-verbosity", caf::atom("quiet"));
    config.set("logger.console-verbosity", caf::atom("quiet"));
    system = std::make_unique<caf::actor_system>(config);
  }
  // Replicas in a ring hold each other: they end only when killed, and the system waits for
  // every actor when it shuts down.
  ~ActorSystem() {
    for (const caf::actor_addr& replica : spawned) {
      caf::anon_send_exit(replica, caf::exit_reason::kill);
    }
  }
  mirrored_replica_actor Spawn(MirroredReplicaOptions options) {
    const mirrored_replica_actor replica =
        ValueOrDie(SpawnMirroredReplica(*system, std::move(options)), "spawning a replica");
    spawned.push_back(replica.address());
    return replica;
  }
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::vector<caf::actor_addr> spawned;
};

// A 6 -> 4 -> 3 classifier on `n` made-up examples: small enough that a step costs nothing.
struct Workload {
  ModelSpec model;
  Dataset train;
  Dataset test;
};

Workload SmallMlp(int64_t n) {
  MlpModelOptions options;
  options.input_dim = 6;
  options.hidden_units = {4};
  options.num_classes = 3;
  options.seed = 7;
  Batch examples;
  examples.size = n;
  Tensor pixels(Shape{n, 6});
  Tensor labels(Shape{n, 1});
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      pixels.data()[i * 6 + j] = static_cast<float>((i * 7 + j * 3) % 11) / 5.0f - 1.0f;
    }
    labels.data()[i] = static_cast<float>(i % 3);
  }
  examples.dense[kFashionMnistPixels] = std::move(pixels);
  examples.labels = std::move(labels);
  Dataset all = ValueOrDie(Dataset::Create(std::move(examples)));
  return {ValueOrDie(MlpModelSpec(options)), all,
          ValueOrDie(Dataset::Create(ValueOrDie(all.Slice(0, n / 2))))};
}

MirroredReplicaOptions Options(const Workload& w,
                               std::shared_ptr<const MirroredFunctions> functions = {}) {
  MirroredReplicaOptions options;
  options.model = w.model;
  options.optimizer = {"sgd", {{"learning_rate", 0.1}}};
  options.train = w.train;
  options.test = w.test;
  options.seed = 5;
  options.functions = std::move(functions);
  options.ring_chunk_elements = 5;  // several chunks a buffer
  return options;
}

// Sends (xs...) and waits for the reply (R) or the error, as a Status.
template <class R, class... Ts>
absl::StatusOr<R> Ask(caf::actor_system& system, const mirrored_replica_actor& replica,
                      Ts... xs) {
  caf::scoped_actor self{system};
  std::optional<absl::StatusOr<R>> out;
  self->request(replica, kReplyTimeout, xs...)
      .receive([&](R& reply) { out = std::move(reply); },
               [&](caf::error& error) { out = ErrorToStatus(error); });
  return *std::move(out);
}

// The ring of `replicas` (in order, each handed the next's actor); their collectives start at
// `next_collective`.
void Link(caf::actor_system& system, const std::vector<mirrored_replica_actor>& replicas,
          int64_t batch_size, int64_t next_collective = 0) {
  const int32_t n = static_cast<int32_t>(replicas.size());
  for (int32_t r = 0; r < n; ++r) {
    MirrorRing ring;
    ring.rank = r;
    ring.members = n;
    ring.batch_size = batch_size;
    ring.next = caf::actor_cast<caf::actor>(replicas[(r + 1) % n]);
    ring.next_collective = next_collective;
    const mirrored_replica_actor& previous = replicas[(r + n - 1) % n];
    ring.previous_id = previous.id();
    ring.previous_node = previous.node();
    CHECK(ValueOrDie(Ask<bool>(system, replicas[r], mirror_link_atom::value, ring), "linking"));
  }
}

// Sends one request to every replica at once (a collective needs them all) and collects the
// replies in order.
template <class R, class... Ts>
std::vector<absl::StatusOr<R>> AskAll(caf::actor_system& system,
                                      const std::vector<mirrored_replica_actor>& replicas,
                                      Ts... xs) {
  caf::scoped_actor self{system};
  using Handle = decltype(self->request(replicas[0], kReplyTimeout, xs...));
  std::vector<Handle> handles;
  for (const mirrored_replica_actor& replica : replicas) {
    handles.push_back(self->request(replica, kReplyTimeout, xs...));
  }
  std::vector<absl::StatusOr<R>> out;
  for (Handle& handle : handles) {
    std::optional<absl::StatusOr<R>> reply;
    handle.receive([&](R& r) { reply = std::move(r); },
                   [&](caf::error& error) { reply = ErrorToStatus(error); });
    out.push_back(*std::move(reply));
  }
  return out;
}

std::vector<float> Values(const Tensor& t) { return {t.values().begin(), t.values().end()}; }

MirroredVariableSpec SumVariable(std::string name) {
  MirroredVariableSpec spec;
  spec.name = std::move(name);
  spec.shape = Shape{2};
  spec.aggregation = VariableAggregation::kSum;
  return spec;
}

TEST_CASE("a replica whose model or optimizer is refused is not spawned") {
  ActorSystem actors;
  MirroredReplicaOptions options = Options(SmallMlp(12));
  options.optimizer = {"no_such_rule", {}};
  CHECK(absl::IsInvalidArgument(SpawnMirroredReplica(*actors.system, options).status()));
}

TEST_CASE("a replica steps only once in a ring, and then its share of each step") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const Workload w = SmallMlp(24);
  const mirrored_replica_actor replica = actors.Spawn(Options(w));
  CHECK(absl::IsFailedPrecondition(Ask<MirrorStepResult>(system, replica, mirror_step_atom::value,
                                                         int64_t{0}, int64_t{0}, int64_t{1})
                                       .status()));
  Link(system, {replica}, /*batch_size=*/4);
  const MirrorStepResult steps = ValueOrDie(Ask<MirrorStepResult>(
      system, replica, mirror_step_atom::value, int64_t{0}, int64_t{0}, int64_t{3}));
  CHECK(steps.examples == std::vector<int64_t>{4, 4, 4});
  REQUIRE(steps.loss_sums.size() == 3);
  for (double loss_sum : steps.loss_sums) CHECK(loss_sum > 0);
  for (int64_t count : {int64_t{0}, kMaxStepsPerRequest + 1}) {
    CAPTURE(count);
    CHECK(absl::IsInvalidArgument(Ask<MirrorStepResult>(system, replica, mirror_step_atom::value,
                                                        int64_t{3}, int64_t{3}, count)
                                      .status()));
  }
  // The next collective still runs.
  CHECK(ValueOrDie(Ask<MirrorStepResult>(system, replica, mirror_step_atom::value, int64_t{3},
                                         int64_t{3}, int64_t{1}))
            .examples.size() == 1);
}

TEST_CASE("a replica refuses a ring place that cannot be, or another job's ring") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  MirroredReplicaOptions options = Options(SmallMlp(12));
  options.job = {{"batch_size", "4"}};
  const mirrored_replica_actor replica = actors.Spawn(options);
  MirrorRing bad_rank;
  bad_rank.rank = 2;
  bad_rank.members = 2;
  bad_rank.job = options.job;
  CHECK(absl::IsInvalidArgument(
      Ask<bool>(system, replica, mirror_link_atom::value, bad_rank).status()));
  MirrorRing other_job;
  other_job.job = {{"batch_size", "8"}};
  const absl::Status refused = Ask<bool>(system, replica, mirror_link_atom::value, other_job).status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(absl::StrContains(refused.message(), "batch_size"));
}

TEST_CASE("two replicas in a ring step together and keep bit-identical copies") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const Workload w = SmallMlp(32);
  const std::vector<mirrored_replica_actor> replicas = {
      actors.Spawn(Options(w)),
      actors.Spawn(Options(w))};
  Link(system, replicas, /*batch_size=*/3);
  for (const absl::StatusOr<MirrorStepResult>& reply :
       AskAll<MirrorStepResult>(system, replicas, mirror_step_atom::value, int64_t{0}, int64_t{0},
                                int64_t{4})) {
    REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
    CHECK(reply->examples == std::vector<int64_t>{3, 3, 3, 3});
  }
  for (const ParamSpec& param : w.model.params) {
    CAPTURE(param.name);
    const TensorSlice a =
        ValueOrDie(Ask<TensorSlice>(system, replicas[0], mirror_read_atom::value, param.name));
    const TensorSlice b =
        ValueOrDie(Ask<TensorSlice>(system, replicas[1], mirror_read_atom::value, param.name));
    CHECK(Values(a.value) == Values(b.value));
  }
}

TEST_CASE("an aborted collective fails on the replica waiting in it, and the ring goes on") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const Workload w = SmallMlp(32);
  const std::vector<mirrored_replica_actor> replicas = {
      actors.Spawn(Options(w)),
      actors.Spawn(Options(w))};
  Link(system, replicas, /*batch_size=*/2);
  // Replica 0 alone starts collective 0: it waits for its neighbour until the abort.
  caf::scoped_actor asker{system};
  auto waiting = asker->request(replicas[0], kReplyTimeout, mirror_step_atom::value, int64_t{0},
                                int64_t{0}, int64_t{1});
  for (const mirrored_replica_actor& replica : replicas) {
    caf::anon_send(replica, mirror_abort_atom::value, int64_t{0});
  }
  std::optional<absl::Status> step;
  waiting.receive([&](MirrorStepResult&) { step = absl::OkStatus(); },
                  [&](caf::error& error) { step = ErrorToStatus(error); });
  CHECK(absl::IsAborted(*step));
  for (const absl::StatusOr<MirrorStepResult>& reply :
       AskAll<MirrorStepResult>(system, replicas, mirror_step_atom::value, int64_t{1}, int64_t{0},
                                int64_t{1})) {
    CHECK_MESSAGE(reply.ok(), reply.status().ToString());
  }
}

TEST_CASE("a replica creates, reads and loads variables as its MirroredReplica does") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const Workload w = SmallMlp(12);
  const mirrored_replica_actor replica = actors.Spawn(Options(w));
  CHECK(ValueOrDie(Ask<bool>(system, replica, mirror_create_atom::value, SumVariable("total"))));
  CHECK(absl::IsAlreadyExists(
      Ask<bool>(system, replica, mirror_create_atom::value, SumVariable("total")).status()));
  TensorSlice total =
      ValueOrDie(Ask<TensorSlice>(system, replica, mirror_read_atom::value, std::string("total")));
  CHECK(Values(total.value) == std::vector<float>{0, 0});
  total.value = Tensor(Shape{2}, 3.0f);
  CHECK(ValueOrDie(Ask<bool>(system, replica, mirror_load_atom::value, total)));
  CHECK(Values(ValueOrDie(Ask<TensorSlice>(system, replica, mirror_read_atom::value,
                                           std::string("total")))
                   .value) == std::vector<float>{3, 3});

  CHECK(absl::IsNotFound(
      Ask<TensorSlice>(system, replica, mirror_read_atom::value, std::string("nope")).status()));
  TensorSlice wide = total;
  wide.value = Tensor(Shape{5}, 1.0f);
  CHECK(absl::IsInvalidArgument(Ask<bool>(system, replica, mirror_load_atom::value, wide).status()));
}

TEST_CASE("a replica runs a registered function and makes its held writes after the reduce") {
  auto functions = std::make_shared<MirroredFunctions>();
  (*functions)["bump"] = [](MirroredReplicaContext& ctx,
                            const ClosureValues& args) -> absl::StatusOr<ClosureValues> {
    const double by = ValueOrDie(args.Get<double>("by"));
    const absl::Status wrote =
        ctx.AssignAdd("total", Tensor(Shape{2}, static_cast<float>(by)));
    if (!wrote.ok()) return wrote;
    return ClosureValues().Set("replica", int64_t{ctx.replica_id()});
  };
  (*functions)["fail"] = [](MirroredReplicaContext&,
                            const ClosureValues&) -> absl::StatusOr<ClosureValues> {
    return absl::ResourceExhaustedError("the function gives up");
  };
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const Workload w = SmallMlp(12);
  const std::vector<mirrored_replica_actor> replicas = {
      actors.Spawn(Options(w, functions)),
      actors.Spawn(Options(w, functions))};
  for (const mirrored_replica_actor& replica : replicas) {
    REQUIRE(ValueOrDie(Ask<bool>(system, replica, mirror_create_atom::value, SumVariable("total"))));
  }
  Link(system, replicas, /*batch_size=*/2);

  ClosureValues args;
  args.Set("by", 1.5);
  const std::vector<absl::StatusOr<ClosureValues>> ran = AskAll<ClosureValues>(
      system, replicas, mirror_run_atom::value, int64_t{0}, std::string("bump"), args);
  for (size_t r = 0; r < ran.size(); ++r) {
    REQUIRE_MESSAGE(ran[r].ok(), ran[r].status().ToString());
    CHECK(ValueOrDie(ran[r]->Get<int64_t>("replica")) == static_cast<int64_t>(r));
    const TensorSlice total = ValueOrDie(
        Ask<TensorSlice>(system, replicas[r], mirror_read_atom::value, std::string("total")));
    CHECK(Values(total.value) == std::vector<float>{3, 3});  // SUM of both replicas' 1.5
  }

  for (const absl::StatusOr<ClosureValues>& reply :
       AskAll<ClosureValues>(system, replicas, mirror_run_atom::value, int64_t{1},
                             std::string("no_such_function"), args)) {
    CHECK(absl::IsNotFound(reply.status()));
  }
  for (const absl::StatusOr<ClosureValues>& reply : AskAll<ClosureValues>(
           system, replicas, mirror_run_atom::value, int64_t{2}, std::string("fail"), args)) {
    // The function's own error on each replica, or the ring's abort it caused.
    CHECK_MESSAGE((absl::IsResourceExhausted(reply.status()) || absl::IsAborted(reply.status())),
                  reply.status().ToString());
  }
}

TEST_CASE("a replica evaluates a test batch, and past the test set answers no examples") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const Workload w = SmallMlp(20);  // 10 test examples
  const mirrored_replica_actor replica = actors.Spawn(Options(w));
  const ClosureValues first =
      ValueOrDie(Ask<ClosureValues>(system, replica, mirror_eval_atom::value, int64_t{0}));
  CHECK(ValueOrDie(first.Get<int64_t>("examples")) == 10);
  CHECK(ValueOrDie(first.Get<double>("loss")) > 0);
  const ClosureValues past =
      ValueOrDie(Ask<ClosureValues>(system, replica, mirror_eval_atom::value, int64_t{1} << 40));
  CHECK(ValueOrDie(past.Get<int64_t>("examples")) == 0);
  CHECK(absl::IsOutOfRange(
      Ask<ClosureValues>(system, replica, mirror_eval_atom::value, int64_t{-1}).status()));
}

TEST_CASE("a ring probe answers its seconds, and refuses a buffer past the limit") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const mirrored_replica_actor replica =
      actors.Spawn(Options(SmallMlp(12)));
  Link(system, {replica}, /*batch_size=*/2);
  CHECK(ValueOrDie(Ask<double>(system, replica, mirror_probe_atom::value, int64_t{0}, int64_t{64},
                               int64_t{2})) >= 0);
  CHECK(absl::IsInvalidArgument(Ask<double>(system, replica, mirror_probe_atom::value, int64_t{2},
                                            kMaxProbeElements + 1, int64_t{1})
                                    .status()));
}

TEST_CASE("a replica without ring links offers none") {
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  const mirrored_replica_actor replica =
      actors.Spawn(Options(SmallMlp(12)));
  caf::scoped_actor self{system};
  std::optional<absl::Status> out;
  self->request(replica, kReplyTimeout, mirror_listen_atom::value)
      .receive([&](int32_t, std::string&) { out = absl::OkStatus(); },
               [&](caf::error& error) { out = ErrorToStatus(error); });
  CHECK(absl::IsFailedPrecondition(*out));
}

}  // namespace
}  // namespace tessera
