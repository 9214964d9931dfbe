// ReplicaGroup in process: N replicas training on shares of a global batch equal one
// LocalTrainer on the whole global batch, the copies stay bit-identical, the aggregation rules
// of writes from a replica context, Run/Reduce/Gather, checkpoints, and a lost replica.
#include "coordinator/mirrored/replica_group.h"

#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "cluster/base/cluster.h"
#include "coordinator/checkpoint/checkpoint_manager.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/mirrored/mirrored_training.h"
#include "coordinator/ps/strategy.h"
#include "core/base/random.h"
#include "core/training/local_trainer.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/partitioner.h"
#include "tessera/workloads/fashion_mnist.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/coordinator/coordinator_test_util.h"
#include "tests/temp_dir.h"

namespace tessera {
namespace {

using testing::CheckOk;
using testing::ValueOrDie;

struct ActorSystem {
  ActorSystem() {
    ConfigureActorSystem(config, 2);
    system = std::make_unique<caf::actor_system>(config);
  }
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
};

// A small MLP (12 -> 16 -> 3) on `n` random examples.
struct Workload {
  ModelSpec model;
  Dataset train;
  Dataset test;
};

Workload SmallMlp(int64_t n) {
  MlpModelOptions options;
  options.input_dim = 12;
  options.hidden_units = {16};
  options.num_classes = 3;
  options.seed = 7;
  Batch examples;
  examples.size = n;
  Tensor pixels(Shape{n, 12});
  Tensor labels(Shape{n, 1});
  uint64_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int64_t j = 0; j < 12; ++j) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const float x = static_cast<float>((state >> 40) % 1000) / 500.0f - 1.0f;
      pixels.data()[i * 12 + j] = x;
      sum += (j % 3 == 0 ? x : -0.5f * x);
    }
    labels.data()[i] = sum > 0.5f ? 2.0f : (sum > -0.5f ? 1.0f : 0.0f);
  }
  examples.dense[kFashionMnistPixels] = std::move(pixels);
  examples.labels = std::move(labels);
  Dataset all = ValueOrDie(Dataset::Create(std::move(examples)));
  return {ValueOrDie(MlpModelSpec(options)), all,
          ValueOrDie(Dataset::Create(ValueOrDie(all.Slice(0, n / 4))))};
}

// A small recsys model (embedding tables: sparse gradients) on generated examples.
Workload SmallRecsys() {
  RecsysConfig config;
  config.num_users = 50;
  config.num_items = 30;
  config.num_train = 400;
  config.num_test = 100;
  RecsysData data = ValueOrDie(GenerateRecsysData(config));
  RecsysModelOptions options;
  options.num_users = 50;
  options.num_items = 30;
  options.embedding_dim = 4;
  options.hidden_units = 8;
  options.seed = 3;
  return {ValueOrDie(RecsysModelSpec(options)), data.train, data.test};
}

// How the replicas of StartMirrored reach one another.
enum class Ring {
  kActors,  // handed each other's actors: ring messages as actor messages
  // Reached by (made-up) addresses, as across processes, with ring links on loopback
  // (Note [Ring links]).
  kLinks,
  // Handed each other's actors, each on a core of its own as the simulation places them (Note
  // [Replicas on cores of their own]).
  kPinned,
};

std::unique_ptr<ReplicaGroup> StartMirrored(caf::actor_system& system, const Workload& w,
                                            const OptimizerSpec& optimizer, int32_t replicas,
                                            int64_t batch_size,
                                            std::shared_ptr<MirroredFunctions> functions = {},
                                            Ring ring = Ring::kActors,
                                            std::vector<std::shared_ptr<SliceStore>> stores = {}) {
  // kLinks: replica r is "127.0.0.1:<r + 1>", which the linker resolves from this table (of weak
  // handles: the replicas hold the linker).
  auto by_address = std::make_shared<std::map<std::string, caf::actor_addr>>();
  std::vector<ReplicaHandle> handles;
  for (int32_t r = 0; r < replicas; ++r) {
    MirroredReplicaOptions options;
    options.model = w.model;
    options.optimizer = optimizer;
    options.train = w.train;
    options.test = w.test;
    options.seed = 5;
    options.functions = functions;
    options.ring_chunk_elements = 37;  // several chunks, none dividing evenly
    if (ring == Ring::kPinned) options.cpu = InProcessReplicaCpu(r);
    if (!stores.empty()) options.store = stores.at(r);
    std::string address;
    if (ring == Ring::kLinks) {
      address = absl::StrCat("127.0.0.1:", r + 1);
      options.ring_link_bind = "127.0.0.1";
      options.linker = [by_address](const std::string& at) -> absl::StatusOr<caf::actor> {
        return caf::actor_cast<caf::actor>(by_address->at(at));
      };
    }
    const mirrored_replica_actor replica =
        ValueOrDie(SpawnMirroredReplica(system, std::move(options)));
    (*by_address)[address] = replica.address();
    handles.push_back({replica, address});
  }
  return ValueOrDie(ReplicaGroup::Create(system, std::move(handles), batch_size, {}));
}

bool BitIdentical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

// Every replica's copy of `variable` is the same bits as replica 0's (and there are copies to
// compare).
bool CopiesIdentical(ReplicaGroup& strategy, const std::string& variable) {
  const PerReplica<Tensor> copies = ValueOrDie(strategy.ReadPerReplica(variable), variable.c_str());
  REQUIRE(copies.values.size() >= 2);
  return std::all_of(copies.values.begin(), copies.values.end(),
                     [&](const Tensor& copy) { return BitIdentical(copy, copies.values[0]); });
}

// The sockets this process has open, by one scan of its descriptors.
int OpenSockets() {
  int sockets = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::filesystem::path target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && absl::StartsWith(target.string(), "socket:")) ++sockets;
  }
  return sockets;
}

// N replicas of B examples each for `steps` steps against one LocalTrainer with batches of N*B
// from the same stream: every parameter within 1e-6, every copy the same bits after every step.
void CheckEqualsOneProcess(const Workload& w, const OptimizerSpec& optimizer, int32_t replicas,
                           int64_t batch_size, int64_t steps, Ring ring = Ring::kActors) {
  ActorSystem actors;
  const int sockets_before = OpenSockets();
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(*actors.system, w, optimizer, replicas, batch_size, {}, ring);
  // Replicas reached by address are not the strategy's to stop; these are, whatever happens.
  absl::Cleanup end_run = [&] { strategy->EndRun(); };
  LocalTrainer local = ValueOrDie(LocalTrainer::Create(w.model, optimizer));
  BatchStream stream =
      ValueOrDie(BatchStream::Create(w.train, replicas * batch_size, /*shuffle=*/true, 5));
  for (int64_t step = 0; step < steps; ++step) {
    const ReplicaGroup::StepResult mirrored = ValueOrDie(strategy->TrainStep(step));
    if (step == 0) {
      // Over links, each replica holds its link to the next and the one from the previous, which
      // its reader accepted (closing its listener) before it read the step's first message: the
      // messages cannot have gone over the actor connection instead.
      CHECK(OpenSockets() - sockets_before == (ring == Ring::kLinks ? 2 * replicas : 0));
    }
    const Batch batch = ValueOrDie(stream.Get(step));
    const float loss = ValueOrDie(local.TrainStep(batch));
    CHECK(mirrored.examples == batch.size);
    CHECK(std::abs(mirrored.loss - loss) <= 1e-5 * (1 + std::abs(loss)));
    for (const ParamSpec& param : w.model.params) {
      const PerReplica<Tensor> copies = ValueOrDie(strategy->ReadPerReplica(param.name));
      REQUIRE(copies.values.size() == static_cast<size_t>(replicas));
      for (const Tensor& copy : copies.values) {
        REQUIRE_MESSAGE(BitIdentical(copy, copies.values[0]),
                        param.name << " differs between replicas after step " << step);
      }
      const Tensor& want = *ValueOrDie(local.variable(param.name));
      float worst = 0;
      for (int64_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::abs(copies.values[0].data()[i] - want.data()[i]));
      }
      REQUIRE_MESSAGE(worst <= 1e-6f, param.name << " is off by " << worst << " after step " << step
                                                 << " with " << optimizer.name);
    }
  }
}

TEST_CASE("mirrored: N replicas of B examples train as one process on N*B, copies identical") {
  const Workload mlp = SmallMlp(200);
  for (const char* rule : {"sgd", "momentum", "adam"}) {
    const OptimizerSpec optimizer{rule, {{"learning_rate", 0.05}}};
    for (int32_t replicas : {1, 2, 3}) {
      CAPTURE(rule);
      CAPTURE(replicas);
      // 200 examples in global batches of 3 * 7 = 21: the epoch's last batch (11) splits
      // unevenly, and step 9 onwards crosses into the next epoch.
      CheckEqualsOneProcess(mlp, optimizer, replicas, 7, 12);
    }
  }
}

TEST_CASE("mirrored: over ring links the replicas train exactly as over actor messages") {
  const Workload mlp = SmallMlp(200);
  for (int32_t replicas : {2, 3}) {
    CAPTURE(replicas);
    CheckEqualsOneProcess(mlp, {"adam", {{"learning_rate", 0.05}}}, replicas, 7, 12, Ring::kLinks);
  }
}

// The cores each thread of this process is bound to, when it is bound to exactly one
// (/proc/self/task/*/status, Cpus_allowed_list): one entry per such thread.
std::multiset<int32_t> ThreadsOnOneCore() {
  std::multiset<int32_t> cores;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      int32_t core = -1;
      char rest = 0;
      if (line.rfind("Cpus_allowed_list:", 0) == 0 &&
          std::sscanf(line.c_str(), "Cpus_allowed_list: %d%c", &core, &rest) >= 1 &&
          (rest == 0 || rest == '\n')) {
        cores.insert(core);
      }
    }
  }
  return cores;
}

TEST_CASE("mirrored: replicas in one process each take a core of their own, round-robin") {
  cpu_set_t allowed;
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  std::vector<int32_t> cores;
  for (int32_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cores.push_back(cpu);
  }
  // A thread that may run on one core only has nothing to spread.
  int32_t alone = 0;
  bool bound = false;
  std::thread one_core([&] {
    cpu_set_t first;
    CPU_ZERO(&first);
    CPU_SET(cores[0], &first);
    bound = sched_setaffinity(0, sizeof(first), &first) == 0;
    alone = InProcessReplicaCpu(0);
  });
  one_core.join();
  REQUIRE(bound);
  CHECK(alone == -1);
  CHECK(InProcessReplicaCpu(-1) == -1);
  if (cores.size() < 2) {
    CHECK(InProcessReplicaCpu(0) == -1);
    return;
  }
  for (int32_t rank = 0; rank < 2 * static_cast<int32_t>(cores.size()); ++rank) {
    CHECK(InProcessReplicaCpu(rank) == cores[static_cast<size_t>(rank) % cores.size()]);
  }
  // Two replicas linked into a ring: each thread is bound to its core, and they train as before.
  const std::multiset<int32_t> before = ThreadsOnOneCore();
  const Workload mlp = SmallMlp(200);
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> strategy = StartMirrored(
      *actors.system, mlp, {"adam", {{"learning_rate", 0.05}}}, 2, 7, {}, Ring::kPinned);
  absl::Cleanup end_run = [&] { strategy->EndRun(); };
  for (int64_t step = 0; step < 3; ++step) CheckOk(strategy->TrainStep(step).status());
  CHECK(CopiesIdentical(*strategy, mlp.model.params[0].name));
  std::multiset<int32_t> pinned = ThreadsOnOneCore();
  for (int32_t core : before) {
    if (auto it = pinned.find(core); it != pinned.end()) pinned.erase(it);
  }
  CHECK(pinned == std::multiset<int32_t>{cores[0], cores[1]});
}

TEST_CASE("mirrored: a stranger's ring link request neither counts nor displaces the real one") {
  const Workload mlp = SmallMlp(200);
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(system, mlp, {"adam", {{"learning_rate", 0.05}}}, 2, 7, {}, Ring::kLinks);
  absl::Cleanup end_run = [&] { strategy->EndRun(); };
  CheckOk(strategy->TrainStep(0).status());
  // Strangers ask replica 0 for links: their requests wait for a ring naming them, the oldest
  // refused once kMaxLinkRequests wait; replica 1's link is untouched and training goes on.
  const mirrored_replica_actor replica = strategy->replicas()[0].actor;
  std::vector<std::unique_ptr<caf::scoped_actor>> strangers;
  for (int i = 0; i < 5; ++i) {
    strangers.push_back(std::make_unique<caf::scoped_actor>(system));
    (*strangers.back())->send(replica, mirror_listen_atom::value);
  }
  caf::scoped_actor& first = *strangers.front();
  first->receive([](int32_t, std::string&) { FAIL("a stranger got a link"); },
                 [](caf::error& error) { CHECK(absl::IsResourceExhausted(ErrorToStatus(error))); },
                 caf::after(std::chrono::seconds(20)) >> [] { FAIL("no answer"); });
  for (int64_t step = 1; step < 4; ++step) CheckOk(strategy->TrainStep(step).status());
  CHECK(CopiesIdentical(*strategy, mlp.model.params[0].name));
}

TEST_CASE("mirrored: embedding tables apply only the rows some replica looked up") {
  const Workload recsys = SmallRecsys();
  for (const char* rule : {"adagrad", "adam", "momentum"}) {
    CAPTURE(rule);
    CheckEqualsOneProcess(recsys, {rule, {{"learning_rate", 0.1}}}, 2, 16, 6);
  }
}

TEST_CASE("mirrored: evaluation on the replicas equals evaluating the same values locally") {
  const Workload mlp = SmallMlp(1500);
  ActorSystem actors;
  const OptimizerSpec adam{"adam", {{"learning_rate", 0.01}}};
  std::unique_ptr<ReplicaGroup> strategy = StartMirrored(*actors.system, mlp, adam, 2, 16);
  for (int64_t step = 0; step < 5; ++step) CheckOk(strategy->TrainStep(step).status());
  LocalTrainer local = ValueOrDie(LocalTrainer::Create(mlp.model, adam));
  for (const ParamSpec& param : mlp.model.params) {
    CheckOk(local.SetVariable(param.name, ValueOrDie(strategy->Read(param.name))));
  }
  const Model model = ValueOrDie(Model::Create(mlp.model));
  // 375 test examples: one batch of 512 on replica 0, replica 1 past the end.
  const EvalResult distributed = ValueOrDie(strategy->Evaluate(model, mlp.test.size()));
  const EvalResult one = ValueOrDie(local.Evaluate(mlp.test));
  CHECK(distributed.examples == one.examples);
  CHECK(distributed.loss == one.loss);
  CHECK(distributed.accuracy == one.accuracy);
}

// Replica functions for the aggregation tests: each replica writes its (rank + 1) times "base".
std::shared_ptr<MirroredFunctions> WriteFunctions() {
  auto functions = std::make_shared<MirroredFunctions>();
  (*functions)["write"] = [](MirroredReplicaContext& ctx,
                             const ClosureValues& args) -> absl::StatusOr<ClosureValues> {
    absl::StatusOr<std::string> name = args.Get<std::string>("variable");
    if (!name.ok()) return name.status();
    Tensor value(Shape{2}, static_cast<float>(ctx.replica_id() + 1));
    absl::Status written = args.Has("add") ? ctx.AssignAdd(*name, std::move(value))
                                           : ctx.Assign(*name, std::move(value));
    if (!written.ok()) return written;
    ClosureValues out;
    out.Set("replica", int64_t{ctx.replica_id()});
    out.Set("value", Tensor(Shape{1, 2}, static_cast<float>(ctx.replica_id())));
    return out;
  };
  return functions;
}

Tensor Read(ReplicaGroup& strategy, const std::string& name) {
  return ValueOrDie(strategy.Read(name));
}

TEST_CASE("mirrored: writes from a replica context follow the variable's aggregation") {
  const Workload mlp = SmallMlp(50);
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(*actors.system, mlp, {"sgd", {}}, 3, 4, WriteFunctions());
  auto create = [&](const std::string& name, VariableSynchronization sync,
                    VariableAggregation aggregation) {
    MirroredVariableSpec spec;
    spec.name = name;
    spec.shape = Shape{2};
    spec.synchronization = sync;
    spec.aggregation = aggregation;
    return strategy->CreateVariable(spec);
  };
  CheckOk(create("sum", VariableSynchronization::kOnWrite, VariableAggregation::kSum));
  CheckOk(create("mean", VariableSynchronization::kOnWrite, VariableAggregation::kMean));
  CheckOk(
      create("first", VariableSynchronization::kOnWrite, VariableAggregation::kOnlyFirstReplica));
  CheckOk(create("none", VariableSynchronization::kAuto, VariableAggregation::kNone));
  CheckOk(create("counter", VariableSynchronization::kOnRead, VariableAggregation::kSum));
  CHECK(absl::IsAlreadyExists(
      create("sum", VariableSynchronization::kOnWrite, VariableAggregation::kSum)));
  CHECK(absl::IsInvalidArgument(
      create("bad", VariableSynchronization::kOnRead, VariableAggregation::kNone)));

  auto run = [&](const std::string& name, bool add) {
    ClosureValues args;
    args.Set("variable", name);
    if (add) args.Set("add", int64_t{1});
    return strategy->Run("write", args);
  };
  // Replicas write 1, 2, 3.
  CheckOk(run("sum", false).status());
  CHECK(Read(*strategy, "sum").data()[0] == 6.0f);
  CheckOk(run("mean", false).status());
  CHECK(std::abs(Read(*strategy, "mean").data()[1] - 2.0f) < 1e-6f);
  CheckOk(run("first", false).status());
  CHECK(Read(*strategy, "first").data()[0] == 1.0f);
  CheckOk(run("first", true).status());
  CHECK(Read(*strategy, "first").data()[0] == 2.0f);
  for (const char* name : {"sum", "mean", "first"})
    CHECK_MESSAGE(CopiesIdentical(*strategy, name), name);
  // NONE from a replica context is an error, on every replica, and changes nothing.
  absl::StatusOr<PerReplica<ClosureValues>> none = run("none", false);
  REQUIRE(absl::IsInvalidArgument(none.status()));
  CHECK(absl::StrContains(none.status().message(), "needs an aggregation"));
  CHECK(Read(*strategy, "none").data()[0] == 0.0f);
  // A sync-on-read counter: each replica adds to its own copy; a read sums them.
  CheckOk(run("counter", true).status());
  CheckOk(run("counter", true).status());
  const PerReplica<Tensor> counters = ValueOrDie(strategy->ReadPerReplica("counter"));
  CHECK(counters.values[2].data()[0] == 6.0f);
  CHECK(Read(*strategy, "counter").data()[0] == 12.0f);
  // The strategy still runs collectives after the failed one.
  CheckOk(run("sum", true).status());
  CHECK(Read(*strategy, "sum").data()[0] == 12.0f);
  CHECK(absl::IsNotFound(strategy->Run("missing", {}).status()));
}

TEST_CASE("mirrored: Run returns per-replica values, Reduce and Gather combine them") {
  const Workload mlp = SmallMlp(50);
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(*actors.system, mlp, {"sgd", {}}, 3, 4, WriteFunctions());
  MirroredVariableSpec spec;
  spec.name = "v";
  spec.shape = Shape{2};
  spec.aggregation = VariableAggregation::kSum;
  CheckOk(strategy->CreateVariable(spec));
  ClosureValues args;
  args.Set("variable", "v");
  const PerReplica<ClosureValues> results = ValueOrDie(strategy->Run("write", args));
  std::vector<Tensor> values;
  for (size_t r = 0; r < LocalResults(results).size(); ++r) {
    CHECK(ValueOrDie(LocalResults(results)[r].Get<int64_t>("replica")) == static_cast<int64_t>(r));
    values.push_back(ValueOrDie(LocalResults(results)[r].Get<Tensor>("value")));
  }
  const PerReplica<Tensor> per_replica{values};
  CHECK(ValueOrDie(MirroredStrategy::Reduce(ReduceOp::kSum, per_replica)).data()[0] == 3.0f);
  CHECK(ValueOrDie(MirroredStrategy::Reduce(ReduceOp::kMean, per_replica)).data()[1] == 1.0f);
  const Tensor gathered = ValueOrDie(MirroredStrategy::Gather(per_replica));
  CHECK(gathered.shape() == Shape{3, 2});
  CHECK(gathered.data()[4] == 2.0f);
}

TEST_CASE("mirrored: a checkpoint restores into a fresh strategy with another replica count") {
  const Workload mlp = SmallMlp(120);
  const OptimizerSpec adam{"adam", {{"learning_rate", 0.01}}};
  testing::TempDir dir;
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> trained = StartMirrored(*actors.system, mlp, adam, 2, 6);
  for (int64_t step = 0; step < 4; ++step) CheckOk(trained->TrainStep(step).status());
  CheckOk(trained->Save(dir.path(), {RunId::Random(), 4}, mlp.model));
  const CheckpointManifest manifest = ValueOrDie(ReadManifest(dir.path()));
  CHECK(manifest.variables.size() == mlp.model.params.size());
  CHECK(manifest.variables[0].step == 4);

  std::unique_ptr<ReplicaGroup> restored = StartMirrored(*actors.system, mlp, adam, 3, 4);
  CHECK(ValueOrDie(restored->Restore(dir.path(), mlp.model, adam)) == 4);
  for (const ParamSpec& param : mlp.model.params) {
    CHECK(BitIdentical(ValueOrDie(restored->Read(param.name)),
                       ValueOrDie(trained->Read(param.name))));
  }
  // Another optimizer's slots do not carry over.
  std::unique_ptr<ReplicaGroup> sgd = StartMirrored(*actors.system, mlp, {"sgd", {}}, 1, 4);
  CHECK(absl::IsInvalidArgument(sgd->Restore(dir.path(), mlp.model, {"sgd", {}}).status()));
}

std::vector<float> Floats(const Tensor& t) { return {t.values().begin(), t.values().end()}; }

// Replica r's function adds (r + 1) * [1, 2] to the ON_READ SUM variable "sums" (replica 0's
// copy [1, 2], replica 1's [2, 4], replica 2's [3, 6]: the variable reads [6, 12]).
std::shared_ptr<MirroredFunctions> AddToSums() {
  auto functions = std::make_shared<MirroredFunctions>();
  (*functions)["add"] = [](MirroredReplicaContext& ctx,
                           const ClosureValues&) -> absl::StatusOr<ClosureValues> {
    const float k = static_cast<float>(ctx.replica_id() + 1);
    TESSERA_RETURN_IF_ERROR(
        ctx.AssignAdd("sums", ValueOrDie(Tensor::FromVector(Shape{2}, {k, 2 * k}))));
    return ClosureValues{};
  };
  return functions;
}

MirroredVariableSpec Sums() {
  MirroredVariableSpec sums{"sums", Shape{2}};
  sums.synchronization = VariableSynchronization::kOnRead;
  sums.aggregation = VariableAggregation::kSum;
  return sums;
}

TEST_CASE("mirrored: an ON_READ SUM variable reads its sum after a restore and after an Assign") {
  const Workload mlp = SmallMlp(120);
  const OptimizerSpec sgd{"sgd", {{"learning_rate", 0.1}}};
  testing::TempDir dir;
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> trained =
      StartMirrored(*actors.system, mlp, sgd, 3, 4, AddToSums());
  CheckOk(trained->CreateVariable(Sums()));
  CheckOk(trained->Run("add", {}).status());
  CHECK(Floats(Read(*trained, "sums")) == std::vector<float>{6, 12});
  CheckOk(trained->Save(dir.path(), {RunId::Random(), 1}, mlp.model));

  // Restored into 3 replicas or 2, each copy holds its share, and the variable reads the sum.
  for (const int32_t replicas : {3, 2}) {
    std::unique_ptr<ReplicaGroup> restored =
        StartMirrored(*actors.system, mlp, sgd, replicas, 4, AddToSums());
    CheckOk(restored->CreateVariable(Sums()));
    CHECK(ValueOrDie(restored->Restore(dir.path(), mlp.model, sgd)) == 1);
    CHECK(Floats(Read(*restored, "sums")) == std::vector<float>{6, 12});
    for (const Tensor& copy : ValueOrDie(restored->ReadPerReplica("sums")).values) {
      CHECK(Floats(copy) == std::vector<float>{6.0f / replicas, 12.0f / replicas});
    }
  }
  // An Assign from the driver sets what the variable reads, as TF's cross-replica assign.
  CheckOk(trained->Assign("sums", ValueOrDie(Tensor::FromVector(Shape{2}, {30, 60}))));
  CHECK(Floats(Read(*trained, "sums")) == std::vector<float>{30, 60});
  // ON_WRITE and MEAN ON_READ variables take the value itself.
  MirroredVariableSpec mean = Sums();
  mean.name = "mean";
  mean.aggregation = VariableAggregation::kMean;
  CheckOk(trained->CreateVariable(mean));
  CheckOk(trained->Assign("mean", ValueOrDie(Tensor::FromVector(Shape{2}, {3, 9}))));
  CHECK(Floats(Read(*trained, "mean")) == std::vector<float>{3, 9});
}

TEST_CASE("mirrored: a resync copies the parameters, not the replicas' own ON_READ copies") {
  const Workload mlp = SmallMlp(120);
  ActorSystem actors;
  // Momentum: a slice that carries the rule's slots sets the step too.
  std::unique_ptr<ReplicaGroup> group = StartMirrored(
      *actors.system, mlp, {"momentum", {{"learning_rate", 0.1}}}, 3, 4, AddToSums());
  CheckOk(group->CreateVariable(Sums()));
  CheckOk(group->TrainStep(0).status());
  CheckOk(group->Run("add", {}).status());
  // Replica 0 one step ahead of the others, as a survivor of a step lost mid-way is.
  const std::string& param = mlp.model.params[0].name;
  caf::scoped_actor self{*actors.system};
  TensorSlice ahead;
  self->request(group->replicas()[0].actor, std::chrono::seconds(20), mirror_read_atom::value,
                param)
      .receive([&](TensorSlice& slice) { ahead = std::move(slice); },
               [](caf::error& error) { FAIL(caf::to_string(error)); });
  ahead.step += 1;
  ahead.value.data()[0] += 1.0f;
  self->request(group->replicas()[0].actor, std::chrono::seconds(20), mirror_load_atom::value,
                ahead)
      .receive([](bool) {}, [](caf::error& error) { FAIL(caf::to_string(error)); });

  CHECK(ValueOrDie(group->Resync(mlp.model)) == ahead.step);
  CHECK(CopiesIdentical(*group, param));
  CHECK(Read(*group, param).data()[0] == ahead.value.data()[0]);
  // Each replica keeps its own copy of "sums": the variable still reads their sum.
  const PerReplica<Tensor> copies = ValueOrDie(group->ReadPerReplica("sums"));
  REQUIRE(copies.values.size() == 3);
  CHECK(Floats(copies.values[0]) == std::vector<float>{1, 2});
  CHECK(Floats(copies.values[2]) == std::vector<float>{3, 6});
  CHECK(Floats(Read(*group, "sums")) == std::vector<float>{6, 12});
}

// Slice files written on this machine, counted; with `fail`, none is (the disk is full).
class CountedFiles final : public SliceStore {
 public:
  mutable std::atomic<int> writes{0};
  std::atomic<bool> fail{false};

  absl::Status Write(const std::string& path, const TensorSliceView& slice) const override {
    if (fail) return absl::ResourceExhaustedError("the disk is full");
    ++writes;
    return files_.Write(path, slice);
  }
  absl::StatusOr<TensorSlice> ReadBlock(const std::string& dir, const CheckpointVariable& variable,
                                        int64_t offset, int64_t rows) const override {
    return files_.ReadBlock(dir, variable, offset, rows);
  }

 private:
  FileSliceStore files_;
};

TEST_CASE("mirrored: the replicas write a checkpoint's files, spread over them") {
  const Workload mlp = SmallMlp(120);
  const OptimizerSpec adam{"adam", {{"learning_rate", 0.01}}};
  ActorSystem actors;
  std::vector<std::shared_ptr<SliceStore>> stores;
  std::vector<CountedFiles*> counted;
  for (int r = 0; r < 3; ++r) {
    auto store = std::make_shared<CountedFiles>();
    counted.push_back(store.get());
    stores.push_back(std::move(store));
  }
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(*actors.system, mlp, adam, 3, 4, {}, Ring::kActors, stores);
  CheckOk(strategy->TrainStep(0).status());
  testing::TempDir dir;
  CheckOk(strategy->Save(dir.path(), {RunId::Random(), 1}, mlp.model));
  const int params = static_cast<int>(mlp.model.params.size());
  REQUIRE(params >= 3);
  for (int r = 0; r < 3; ++r) CHECK(counted[r]->writes == (params - r + 2) / 3);
  const CheckpointManifest manifest = ValueOrDie(ReadManifest(dir.path()));
  REQUIRE(manifest.variables.size() == mlp.model.params.size());
  for (const CheckpointVariable& entry : manifest.variables) {
    REQUIRE(entry.optimizer.has_value());
    CHECK(entry.optimizer->name == "adam");
    CHECK(entry.step == 1);
  }

  // One replica that cannot write fails the save, naming what it was saving; no manifest is
  // written, so the checkpoint is invisible.
  counted[1]->fail = true;
  testing::TempDir failed;
  const absl::Status status = strategy->Save(failed.path(), {RunId::Random(), 1}, mlp.model);
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(status.message(), absl::StrCat("saving ", mlp.model.params[1].name)));
  CHECK_FALSE(std::filesystem::exists(absl::StrCat(failed.path(), "/", kManifestFile)));
}

TEST_CASE("mirrored: a lost replica fails the step on every replica, then the ring goes on") {
  const Workload mlp = SmallMlp(120);
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(*actors.system, mlp, {"sgd", {{"learning_rate", 0.1}}}, 3, 4);
  CheckOk(strategy->TrainStep(0).status());
  const Tensor before = Read(*strategy, mlp.model.params[0].name);
  caf::anon_send_exit(strategy->replicas()[1].actor, caf::exit_reason::kill);
  absl::StatusOr<ReplicaGroup::StepResult> step = strategy->TrainStep(1);
  REQUIRE(absl::IsUnavailable(step.status()));
  CHECK(absl::StrContains(step.status().message(), "replica 1"));
  // No survivor applied anything for the failed step.
  CHECK(BitIdentical(Read(*strategy, mlp.model.params[0].name), before));
  CHECK(strategy->LostReplicas() == std::vector<int32_t>{1});
  CheckOk(strategy->Drop({1}));
  CHECK(strategy->num_replicas_in_sync() == 2);
  const ReplicaGroup::StepResult result = ValueOrDie(strategy->TrainStep(1));
  CHECK(result.examples == 8);
  CHECK(CopiesIdentical(*strategy, mlp.model.params[0].name));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Reads every parameter of `model` from the parameter-server strategy.
std::map<std::string, Tensor> PsValues(const ParameterServerStrategy& strategy,
                                       const ModelSpec& model) {
  std::map<std::string, Tensor> values;
  for (const ParamSpec& param : model.params) {
    values.emplace(param.name, ValueOrDie(strategy.variables().at(param.name).Read()));
  }
  return values;
}

TEST_CASE("mirrored: checkpoints move between the mirrored and the parameter-server strategy") {
  // Recsys: its tables are sharded 3 ways on 2 PS, unsharded on the replicas.
  const Workload recsys = SmallRecsys();
  const OptimizerSpec adagrad{"adagrad", {{"learning_rate", 0.1}}};
  std::unique_ptr<Cluster> cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy ps(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(recsys.model)));
  ValueOrDie(ps.CreateModelVariables(model, adagrad));
  REQUIRE(ps.variables().at(recsys.model.params[0].name).num_shards() == 3);

  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> mirrored = StartMirrored(*actors.system, recsys, adagrad, 2, 16);
  for (int64_t step = 0; step < 5; ++step) CheckOk(mirrored->TrainStep(step).status());

  // Mirrored -> parameter servers: every value and the optimizer step.
  testing::TempDir from_mirrored;
  CheckOk(mirrored->Save(from_mirrored.path(), {RunId::Random(), 5}, recsys.model));
  CHECK(ValueOrDie(RestoreCheckpoint(ps, from_mirrored.path())) == 5);
  for (const auto& [name, value] : PsValues(ps, recsys.model)) {
    CHECK_MESSAGE(BitIdentical(value, ValueOrDie(mirrored->Read(name))), name);
  }

  // Parameter servers -> mirrored: a fresh strategy of 3 replicas gets the sharded values.
  testing::TempDir from_ps;
  CheckOk(SaveCheckpoint(ps, from_ps.path(), 5));
  std::unique_ptr<ReplicaGroup> fresh = StartMirrored(*actors.system, recsys, adagrad, 3, 8);
  CHECK(ValueOrDie(fresh->Restore(from_ps.path(), recsys.model, adagrad)) == 5);
  for (const ParamSpec& param : recsys.model.params) {
    const PerReplica<Tensor> copies = ValueOrDie(fresh->ReadPerReplica(param.name));
    for (const Tensor& copy : copies.values) {
      CHECK_MESSAGE(BitIdentical(copy, ValueOrDie(mirrored->Read(param.name))), param.name);
    }
  }
  // Both continue with the same slots: one more step from the same values gives the same bits.
  CHECK(ValueOrDie(fresh->AppliedSteps(recsys.model)).values[2] == 5);
}

TrainingJob MlpJob(int64_t steps) {
  const Workload w = SmallMlp(600);
  TrainingJob job;
  job.name = "mirrored_test";
  job.model = w.model;
  job.optimizer = {"adam", {{"learning_rate", 0.01}}};
  job.train = w.train;
  job.test = w.test;
  job.steps = steps;
  job.batch_size = 10;
  return job;
}

TEST_CASE("mirrored training: a lost replica, without checkpoints, stops the run naming it") {
  ParameterServerTrainingOptions options;
  options.workers = 3;
  options.inject_worker_failures = 1;
  nlohmann::json summary;
  absl::StatusOr<TrainingRun> run =
      TrainMirrored(MlpJob(100), options, ReplicaLossPolicy::kRestore, 0, summary);
  REQUIRE(absl::IsUnavailable(run.status()));
  CHECK(absl::StrContains(run.status().message(), "without --checkpoint_dir"));
}

TEST_CASE("mirrored training: lost replicas are restored from the latest checkpoint") {
  testing::TempDir dir;
  ParameterServerTrainingOptions options;
  options.workers = 3;
  options.inject_worker_failures = 2;
  options.checkpoint_dir = dir.path();
  options.checkpoint_every = 10;
  testing::TempDir exported;
  options.export_dir = exported.path() + "/model";  // created by the export
  nlohmann::json summary;
  const TrainingRun run =
      ValueOrDie(TrainMirrored(MlpJob(100), options, ReplicaLossPolicy::kRestore, 0, summary));
  // The export holds the final values: the final checkpoint's.
  const ExportedModel model = ValueOrDie(ReadExportedModel(options.export_dir));
  CHECK(model.step == 100);
  const std::string final_checkpoint = dir.path() + "/ckpt-100";
  const CheckpointManifest manifest = ValueOrDie(ReadManifest(final_checkpoint));
  for (const CheckpointVariable& variable : manifest.variables) {
    const TensorSlice saved =
        ValueOrDie(ReadSliceBlock(final_checkpoint, variable, 0, variable.shape.rows()));
    CHECK_MESSAGE(BitIdentical(saved.value, model.variables.at(variable.name)), variable.name);
  }
  CHECK(summary["replicas_lost"] == 2);
  CHECK(summary["worker_failures"] == 2);  // the same losses, as a worker failure each
  CHECK(summary["worker_restarts"] == 2);  // each replica started again in its place
  CHECK(summary["replicas_in_sync"] == 3);
  CHECK(summary["global_step"] == 100);
  for (const auto& loss : summary["replica_losses"]) {
    CHECK(loss["action"] == "restored");
    CHECK(loss["checkpoint_step"].get<int64_t>() % 10 == 0);
  }
  REQUIRE(run.eval.has_value());
  // Every step of the run was trained once after the last restore: the steps taken are the
  // run's plus what the restores took back.
  int64_t lost = 0;
  for (const auto& loss : summary["replica_losses"]) lost += loss["lost_steps"].get<int64_t>();
  CHECK(run.steps == 100 + lost);
}

TEST_CASE("mirrored training shows its replicas as it goes: steps, a loss, a replacement") {
  testing::TempDir dir;
  ParameterServerTrainingOptions options;
  options.workers = 3;
  options.inject_worker_failures = 1;
  options.checkpoint_dir = dir.path();
  options.checkpoint_every = 10;
  std::vector<WorkerPoolStatus> shown;
  RunObservers observers;
  observers.on_replicas = [&shown](const WorkerPoolStatus& replicas) {
    shown.push_back(replicas);
  };
  nlohmann::json summary;
  const TrainingRun run = ValueOrDie(
      TrainMirrored(MlpJob(60), options, ReplicaLossPolicy::kRestore, 0, summary, observers));
  REQUIRE(shown.size() >= 3);  // at the start, after requests, after the recovery
  const WorkerPoolStatus& first = shown.front();
  REQUIRE(first.slots.size() == 3);
  CHECK(first.live_slots == std::vector<int32_t>{0, 1, 2});
  CHECK(first.slots[0].completed == 0);
  const WorkerPoolStatus& last = shown.back();
  CHECK(last.live_slots == std::vector<int32_t>{0, 1, 2});
  CHECK(last.worker_failures == 1);
  CHECK(last.worker_restarts == 1);
  int64_t failures = 0;
  for (const WorkerSlotStatus& slot : last.slots) {
    failures += slot.failures;
    CHECK(slot.starts == 1 + slot.failures);  // the lost one started again in its place
    CHECK(slot.completed == run.steps);        // every replica trains every step taken
    CHECK(slot.last_step == 59);
  }
  CHECK(failures == 1);
}

TEST_CASE("mirrored training: a cadence in seconds checkpoints between requests") {
  testing::TempDir dir;
  ParameterServerTrainingOptions options;
  options.workers = 2;
  options.checkpoint_dir = dir.path();
  // A nanosecond: due at the end of every request of steps (50 of them), and the final one.
  options.checkpoint_every_seconds = 1e-9;
  nlohmann::json summary;
  ValueOrDie(TrainMirrored(MlpJob(150), options, ReplicaLossPolicy::kRestore, 0, summary));
  REQUIRE(summary["global_step"] == 150);
  CHECK(CheckpointManager(dir.path(), 3).Checkpoints() ==
        std::vector<std::string>{dir.path() + "/ckpt-50", dir.path() + "/ckpt-100",
                                 dir.path() + "/ckpt-150"});
}

TEST_CASE("mirrored training: --on_replica_loss=continue goes on with the replicas left") {
  ParameterServerTrainingOptions options;
  options.workers = 3;
  options.inject_worker_failures = 1;
  nlohmann::json summary;
  const TrainingRun run =
      ValueOrDie(TrainMirrored(MlpJob(100), options, ReplicaLossPolicy::kContinue, 0, summary));
  CHECK(summary["replicas_lost"] == 1);
  CHECK(summary["worker_failures"] == 1);
  CHECK(summary["worker_restarts"] == 0);  // the survivors went on without it
  CHECK(summary["replicas_in_sync"] == 2);
  CHECK(summary["global_batch_size"] == 20);
  CHECK(summary["replica_losses"][0]["action"] == "continued");
  CHECK(summary["global_step"] == 100);
  CHECK(run.steps == 100);
  REQUIRE(run.eval.has_value());
  CHECK(run.eval->accuracy.value_or(0) > 0.5);
}

TEST_CASE("mirrored training: --steps are global steps, and --epochs passes of global batches") {
  ParameterServerTrainingOptions options;
  options.workers = 3;
  nlohmann::json summary;
  TrainingRun run =
      ValueOrDie(TrainMirrored(MlpJob(30), options, ReplicaLossPolicy::kRestore, 0, summary));
  CHECK(summary["global_step"] == 30);  // not 30 batches of 10 shared by 3 replicas
  CHECK(run.steps == 30);
  CHECK(run.examples == 30 * 3 * 10);

  // 2 passes over 600 examples: 134 steps of 9 on parameter servers, 2 x 34 global batches of
  // 2 x 9 here (each pass's last one partial), every example of each pass trained once.
  TrainingJob job = MlpJob(0);
  job.batch_size = 9;
  REQUIRE(ScheduleTraining(job, 0, 2).ok());
  CHECK(job.steps == 134);
  CHECK(job.epochs == 2);
  CHECK(DescribeSchedule(job) == "2 epochs of 600 examples in batches of 9");
  options.workers = 2;
  run = ValueOrDie(TrainMirrored(job, options, ReplicaLossPolicy::kRestore, 0, summary));
  CHECK(summary["global_step"] == 68);
  CHECK(run.examples == 1200);

  // --steps given: no epochs, the steps as they are.
  REQUIRE(ScheduleTraining(job, 5, 2).ok());
  CHECK(job.steps == 5);
  CHECK(job.epochs == 0);
  CHECK(DescribeSchedule(job) == "5 steps of 9");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Asks `replica` and returns the error's status (OK for a reply).
template <class Reply, class... Ts>
absl::Status Ask(caf::actor_system& system, const mirrored_replica_actor& replica, Ts&&... xs) {
  caf::scoped_actor self{system};
  absl::Status out = absl::DeadlineExceededError("no answer");
  self->request(replica, std::chrono::seconds(20), std::forward<Ts>(xs)...)
      .receive([&](Reply&) { out = absl::OkStatus(); },
               [&](caf::error& error) { out = ErrorToStatus(error); });
  return out;
}

// Asks `replica` for a ring link: OK when it answers a port and token.
absl::Status AskForLink(caf::actor_system& system, const mirrored_replica_actor& replica) {
  caf::scoped_actor self{system};
  absl::Status out = absl::DeadlineExceededError("no answer");
  self->request(replica, std::chrono::seconds(20), mirror_listen_atom::value)
      .receive([&](int32_t, std::string&) { out = absl::OkStatus(); },
               [&](caf::error& error) { out = ErrorToStatus(error); });
  return out;
}

TEST_CASE("a replica refuses forged requests and stays in service") {
  const Workload mlp = SmallMlp(40);
  ActorSystem actors;
  std::unique_ptr<ReplicaGroup> strategy = StartMirrored(*actors.system, mlp, {"sgd", {}}, 2, 4);
  const mirrored_replica_actor replica = strategy->replicas()[0].actor;
  caf::actor_system& system = *actors.system;
  for (const auto& [members, rank, batch] : {std::tuple<int32_t, int32_t, int64_t>{0, 0, 4},
                                             {1 << 30, 0, 4},
                                             {2, 2, 4},
                                             {2, -1, 4},
                                             {2, 0, 0},
                                             {2, 0, int64_t{1} << 62}}) {
    MirrorRing ring;
    ring.members = members;
    ring.rank = rank;
    ring.batch_size = batch;
    CHECK(absl::IsInvalidArgument(Ask<bool>(system, replica, mirror_link_atom::value, ring)));
  }
  MirrorRing other_job;
  other_job.job = {{"batch_size", "999"}};
  const absl::Status refused = Ask<bool>(system, replica, mirror_link_atom::value, other_job);
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(absl::StrContains(refused.message(), "batch_size"));
  CHECK(absl::IsInvalidArgument(Ask<MirrorStepResult>(system, replica, mirror_step_atom::value,
                                                      int64_t{99}, int64_t{0}, int64_t{0})));
  CHECK(absl::IsInvalidArgument(Ask<double>(system, replica, mirror_probe_atom::value, int64_t{99},
                                            int64_t{1} << 40, int64_t{1})));
  CHECK(absl::IsOutOfRange(
      Ask<ClosureValues>(system, replica, mirror_eval_atom::value, int64_t{-1})));
  CHECK(Ask<ClosureValues>(system, replica, mirror_eval_atom::value, int64_t{1} << 62).ok());
  CHECK(absl::IsNotFound(
      Ask<TensorSlice>(system, replica, mirror_read_atom::value, std::string("nope"))));
  TensorSlice partial;
  partial.variable = mlp.model.params[0].name;
  partial.value = Tensor(Shape{1});
  CHECK(absl::IsInvalidArgument(Ask<bool>(system, replica, mirror_load_atom::value, partial)));
  // Ring messages from anyone but the previous replica are dropped: of no collective, of a far
  // one, and the first segment of the next collective (0), which would break its sum (or abort
  // it as out of step when the real one came) if it were taken in.
  caf::scoped_actor stranger{system};
  stranger->send(replica, mirror_ring_atom::value, int64_t{-5},
                 RingChunk{0, 0, RingValues::Own(Tensor(Shape{3}))});
  stranger->send(replica, mirror_ring_atom::value, int64_t{1} << 40,
                 RingChunk{7, 9, RingValues::Own(Tensor(Shape{3}))});
  caf::anon_send(replica, mirror_ring_atom::value, int64_t{0},
                 RingChunk{0, 0, RingValues::Own(Tensor(Shape{18}, 1e6f))});
  stranger->send(replica, mirror_ring_atom::value, int64_t{0},
                 RingChunk{0, 0, RingValues::Own(Tensor(Shape{18}, 1e6f))});
  caf::anon_send(replica, mirror_abort_atom::value, int64_t{-3});
  // So are ring link messages under a key the replica never made, and it offers no link itself
  // (it is not networked).
  caf::anon_send(replica, mirror_data_atom::value, uint64_t{0}, int64_t{0},
                 RingChunk{0, 0, RingValues::Own(Tensor(Shape{18}, 1e6f))});
  caf::anon_send(replica, mirror_data_atom::value, uint64_t{0}, std::string("forged"));
  CHECK(absl::IsFailedPrecondition(AskForLink(system, replica)));
  // The strategy trains on.
  for (int64_t step = 0; step < 3; ++step) CheckOk(strategy->TrainStep(step).status());
  CHECK(CopiesIdentical(*strategy, mlp.model.params[0].name));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("mirrored: a request of the most steps runs them in a loop, not nested calls") {
  const Workload mlp = SmallMlp(64);
  ActorSystem actors;
  // One replica: every all-reduce ends at once, inside the step that starts it.
  std::unique_ptr<ReplicaGroup> strategy =
      StartMirrored(*actors.system, mlp, {"sgd", {{"learning_rate", 0.01}}}, 1, 4);
  const std::vector<ReplicaGroup::StepResult> steps =
      ValueOrDie(strategy->TrainSteps(0, kMaxStepsPerRequest));
  CHECK(steps.size() == static_cast<size_t>(kMaxStepsPerRequest));
  CHECK(ValueOrDie(strategy->AppliedSteps(mlp.model)).values[0] == kMaxStepsPerRequest);
  CHECK(ValueOrDie(strategy->ProbeRing(1000, kMaxStepsPerRequest)) >= 0);
  CHECK(absl::IsInvalidArgument(strategy->TrainSteps(0, kMaxStepsPerRequest + 1).status()));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("a replica flooded with ring messages ahead aborts that collective, not its memory") {
  const Workload mlp = SmallMlp(64);
  ActorSystem actors;
  caf::actor_system& system = *actors.system;
  MirroredReplicaOptions options;
  options.model = mlp.model;
  options.optimizer = {"sgd", {{"learning_rate", 0.01}}};
  options.train = mlp.train;
  options.test = mlp.test;
  const mirrored_replica_actor replica = ValueOrDie(SpawnMirroredReplica(system, options));
  // Replica 1 of 2, between two actors of the test's: `flooder` before it, `next` after it.
  caf::scoped_actor flooder{system};
  caf::scoped_actor next{system};
  MirrorRing ring;
  ring.rank = 1;
  ring.members = 2;
  ring.batch_size = 4;
  ring.next = caf::actor_cast<caf::actor>(next);
  ring.previous_id = flooder->id();
  ring.previous_node = flooder->node();
  CheckOk(Ask<bool>(system, replica, mirror_link_atom::value, ring));
  // 5 x 64 MiB for the next collective (0): beyond what a neighbour one step ahead could send.
  const int64_t floats = kMaxProbeElements / 4;
  for (int i = 0; i < 5; ++i) {
    flooder->send(replica, mirror_ring_atom::value, int64_t{0},
                  RingChunk{0, 0, RingValues::Own(Tensor(Shape{floats}))});
  }
  // Collective 0 was aborted here, and the abort passed on around the ring: its step fails.
  bool passed_on = false;
  next->receive([&](mirror_abort_atom, int64_t collective) { passed_on = collective == 0; },
                caf::after(std::chrono::seconds(20)) >> [] {});
  CHECK(passed_on);
  CHECK(absl::IsAborted(Ask<MirrorStepResult>(system, replica, mirror_step_atom::value, int64_t{0},
                                              int64_t{0}, int64_t{1})));
  // The replica stays in service.
  CHECK(Ask<TensorSlice>(system, replica, mirror_read_atom::value, mlp.model.params[0].name).ok());
  caf::anon_send_exit(replica, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace tessera
