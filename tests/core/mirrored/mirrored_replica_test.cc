// MirroredReplica (core/mirrored/mirrored_replica.h): a replica's copies of the model's parameters
// and the strategy's variables, writes from a replica context (Note [Writes from a replica
// context]), and the slices a checkpoint saves and restores.
#include "core/mirrored/mirrored_replica.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "tessera/workloads/reference_models.h"
#include "tests/core/checkpoint/kept_slices.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using ::tessera::testing::CheckOk;
using ::tessera::testing::ValueOrDie;

constexpr const char* kTable = "user_embedding";  // a parameter of the model: [5, 4]

ModelSpec SmallModel() {
  RecsysModelOptions options;
  options.num_users = 5;
  options.num_items = 3;
  options.embedding_dim = 4;
  options.hidden_units = 4;
  options.seed = 11;
  return ValueOrDie(RecsysModelSpec(options), "building the model spec");
}

OptimizerSpec Adagrad() { return OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}}; }

MirroredReplica Replica() {
  return ValueOrDie(MirroredReplica::Create(SmallModel(), Adagrad()), "creating a replica");
}

MirroredVariableSpec Variable(std::string name, VariableAggregation aggregation,
                              VariableSynchronization sync = VariableSynchronization::kOnWrite) {
  MirroredVariableSpec spec;
  spec.name = std::move(name);
  spec.shape = Shape{2};
  spec.initializer = InitializerSpec{"ones", {}, 0};
  spec.synchronization = sync;
  spec.aggregation = aggregation;
  return spec;
}

std::vector<float> Values(const Tensor& t) { return {t.values().begin(), t.values().end()}; }

std::vector<float> ValueOf(const MirroredReplica& replica, absl::string_view name) {
  return Values(*ValueOrDie(replica.Read(name), "reading"));
}

Tensor Vec(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return ValueOrDie(Tensor::FromVector(Shape{n}, std::move(values)));
}

TEST_CASE("replicas created from one spec hold the same parameters, bit for bit") {
  const MirroredReplica a = Replica();
  const MirroredReplica b = Replica();
  const std::vector<float> table = ValueOf(a, kTable);
  CHECK(table.size() == 20);
  CHECK(table == ValueOf(b, kTable));
  CHECK(Values(*ValueOrDie(a.trainer().variable(kTable))) == table);
}

TEST_CASE("a replica refuses an optimizer LocalTrainer refuses") {
  CHECK(MirroredReplica::Create(SmallModel(), OptimizerSpec{"no_such_rule", {}}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a variable is created from its spec and read back with its spec") {
  MirroredReplica replica = Replica();
  MirroredVariableSpec spec = Variable("total", VariableAggregation::kSum);
  spec.shape = Shape{2, 3};
  CheckOk(replica.CreateVariable(spec));
  CHECK(ValueOf(replica, "total") == std::vector<float>(6, 1.0f));
  const MirroredVariableSpec* got = ValueOrDie(replica.VariableSpec("total"));
  CHECK(got->shape == Shape{2, 3});
  CHECK(got->aggregation == VariableAggregation::kSum);

  // A parameter is no strategy variable; an unknown name is neither.
  CHECK(replica.VariableSpec(kTable).status().code() == absl::StatusCode::kNotFound);
  CHECK(replica.VariableSpec("nothing").status().code() == absl::StatusCode::kNotFound);
  CHECK(replica.Read("nothing").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("creating a variable refuses a taken name and an invalid spec") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("v", VariableAggregation::kSum)));
  CHECK(replica.CreateVariable(Variable("v", VariableAggregation::kMean)).code() ==
        absl::StatusCode::kAlreadyExists);
  CHECK(replica.CreateVariable(Variable(kTable, VariableAggregation::kSum)).code() ==
        absl::StatusCode::kAlreadyExists);

  struct Case {
    const char* what;
    MirroredVariableSpec spec;
  };
  std::vector<Case> cases;
  cases.push_back({"no name", Variable("", VariableAggregation::kSum)});
  cases.push_back({"on-read without an aggregation",
                   Variable("r", VariableAggregation::kNone, VariableSynchronization::kOnRead)});
  MirroredVariableSpec mean_int = Variable("m", VariableAggregation::kMean);
  mean_int.dtype = DType::kInt64;
  cases.push_back({"mean of int64", mean_int});
  MirroredVariableSpec int_sum = Variable("i", VariableAggregation::kSum);
  int_sum.dtype = DType::kInt64;
  cases.push_back({"not float32", int_sum});
  MirroredVariableSpec negative = Variable("n", VariableAggregation::kSum);
  negative.shape = Shape{-2};
  cases.push_back({"a negative dimension", negative});
  MirroredVariableSpec bad_init = Variable("b", VariableAggregation::kSum);
  bad_init.initializer = InitializerSpec{"no_such_initializer", {}, 0};
  cases.push_back({"an unknown initializer", bad_init});
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK(replica.CreateVariable(c.spec).code() == absl::StatusCode::kInvalidArgument);
    if (!c.spec.name.empty()) {
      CHECK(replica.Read(c.spec.name).status().code() == absl::StatusCode::kNotFound);
    }
  }
}

TEST_CASE("a replica context reads local copies and knows its replica") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("v", VariableAggregation::kSum)));
  MirroredReplicaContext ctx(replica, 1, 3);
  CHECK(ctx.replica_id() == 1);
  CHECK(ctx.num_replicas() == 3);
  CHECK(Values(*ValueOrDie(ctx.Read("v"))) == std::vector<float>{1, 1});
  CHECK(Values(*ValueOrDie(ctx.Read(kTable))) == ValueOf(replica, kTable));
  CHECK(ctx.Read("nothing").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("writes to an on-write variable are held, in order, and change nothing yet") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("a", VariableAggregation::kSum)));
  CheckOk(replica.CreateVariable(
      Variable("auto", VariableAggregation::kMean, VariableSynchronization::kAuto)));
  MirroredReplicaContext ctx(replica, 0, 2);
  CheckOk(ctx.Assign("a", Vec({3, 4})));
  CheckOk(ctx.AssignAdd("auto", Vec({5, 6})));
  REQUIRE(ctx.held_writes().size() == 2);
  CHECK(ctx.held_writes()[0].variable == "a");
  CHECK_FALSE(ctx.held_writes()[0].add);
  CHECK(ctx.held_writes()[1].variable == "auto");
  CHECK(ctx.held_writes()[1].add);
  CHECK(Values(ctx.held_writes()[1].value) == std::vector<float>{5, 6});
  CHECK(ValueOf(replica, "a") == std::vector<float>{1, 1});
  CHECK(ValueOf(replica, "auto") == std::vector<float>{1, 1});
}

TEST_CASE("a write a replica context cannot make is refused and holds nothing") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("sum", VariableAggregation::kSum)));
  CheckOk(replica.CreateVariable(Variable("none", VariableAggregation::kNone)));
  MirroredReplicaContext ctx(replica, 0, 2);

  CHECK(ctx.Assign("nothing", Vec({1, 1})).code() == absl::StatusCode::kNotFound);
  CHECK(ctx.Assign(kTable, Tensor(Shape{5, 4}, 1.0f)).code() == absl::StatusCode::kNotFound);
  CHECK(ctx.Assign("sum", Vec({1, 2, 3})).code() == absl::StatusCode::kInvalidArgument);
  const absl::Status none = ctx.AssignAdd("none", Vec({1, 1}));
  CHECK(none.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(none.message(), "an update from a replica context needs an aggregation"));
  CHECK(ctx.held_writes().empty());
  CHECK(ValueOf(replica, "sum") == std::vector<float>{1, 1});
}

TEST_CASE("writes to an on-read variable change the replica's own copy at once") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(
      Variable("count", VariableAggregation::kSum, VariableSynchronization::kOnRead)));
  MirroredReplica other = Replica();
  CheckOk(other.CreateVariable(
      Variable("count", VariableAggregation::kSum, VariableSynchronization::kOnRead)));
  MirroredReplicaContext ctx(replica, 0, 2);
  CheckOk(ctx.AssignAdd("count", Vec({2, 3})));
  CHECK(ValueOf(replica, "count") == std::vector<float>{3, 4});
  CheckOk(ctx.Assign("count", Vec({7, 8})));
  CHECK(ValueOf(replica, "count") == std::vector<float>{7, 8});
  CHECK(ctx.held_writes().empty());
  CHECK(ValueOf(other, "count") == std::vector<float>{1, 1});  // another replica's copy

  CHECK(ctx.Assign("count", Vec({1})).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ValueOf(replica, "count") == std::vector<float>{7, 8});
}

// Every replica's writes packed, summed as the all-reduce sums them, and applied on every
// replica.
void AllReduceWrites(std::vector<MirroredReplica>& replicas,
                     const std::vector<std::vector<MirroredWrite>>& writes) {
  const int32_t n = static_cast<int32_t>(replicas.size());
  std::vector<float> sum;
  for (int32_t r = 0; r < n; ++r) {
    const std::vector<float> packed = ValueOrDie(replicas[r].PackWrites(writes[r], r, n));
    if (r == 0) {  // the ring adds the others' contributions to one replica's own
      sum = packed;
      continue;
    }
    REQUIRE(packed.size() == sum.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += packed[i];
  }
  for (int32_t r = 0; r < n; ++r) CheckOk(replicas[r].ApplyWrites(writes[r], sum));
}

TEST_CASE("held writes reduce as their aggregation says and leave every replica alike") {
  std::vector<MirroredReplica> replicas;
  for (int r = 0; r < 3; ++r) {
    replicas.push_back(Replica());
    CheckOk(replicas.back().CreateVariable(Variable("sum", VariableAggregation::kSum)));
    CheckOk(replicas.back().CreateVariable(Variable("mean", VariableAggregation::kMean)));
    CheckOk(replicas.back().CreateVariable(
        Variable("first", VariableAggregation::kOnlyFirstReplica)));
  }
  std::vector<std::vector<MirroredWrite>> writes(3);
  for (int32_t r = 0; r < 3; ++r) {
    MirroredReplicaContext ctx(replicas[r], r, 3);
    const float x = static_cast<float>(r + 1);  // 1, 2, 3
    CheckOk(ctx.Assign("sum", Vec({x, 10 * x})));
    CheckOk(ctx.AssignAdd("mean", Vec({3 * x, 0})));
    CheckOk(ctx.Assign("first", Vec({x, -x})));
    writes[r] = ctx.held_writes();
  }
  // Replica 1's contribution: SUM its own, MEAN a third of it, ONLY_FIRST_REPLICA zeros.
  CHECK(ValueOrDie(replicas[1].PackWrites(writes[1], 1, 3)) ==
        std::vector<float>{2, 20, 2, 0, 0, 0});
  AllReduceWrites(replicas, writes);
  for (const MirroredReplica& replica : replicas) {
    CHECK(ValueOf(replica, "sum") == std::vector<float>{6, 60});
    CHECK(ValueOf(replica, "mean") == std::vector<float>{1 + 6, 1});  // assign_add of the mean
    CHECK(ValueOf(replica, "first") == std::vector<float>{1, -1});
  }
}

TEST_CASE("ONLY_FIRST_REPLICA keeps replica 0's value to the bit, -0.0 too") {
  std::vector<MirroredReplica> replicas;
  for (int r = 0; r < 3; ++r) {
    replicas.push_back(Replica());
    CheckOk(
        replicas.back().CreateVariable(Variable("first", VariableAggregation::kOnlyFirstReplica)));
  }
  std::vector<std::vector<MirroredWrite>> writes(3);
  for (int32_t r = 0; r < 3; ++r) {
    MirroredReplicaContext ctx(replicas[r], r, 3);
    CheckOk(ctx.Assign("first", Vec({r == 0 ? -0.0f : 5.0f, 0.0f})));
    writes[r] = ctx.held_writes();
  }
  AllReduceWrites(replicas, writes);
  for (const MirroredReplica& replica : replicas) {
    const std::vector<float> value = ValueOf(replica, "first");
    CHECK(value[0] == 0.0f);
    CHECK(std::signbit(value[0]));  // the others' contributions did not make it +0.0
    CHECK_FALSE(std::signbit(value[1]));
  }
}

TEST_CASE("writes that cannot be packed or applied are refused, changing nothing") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("sum", VariableAggregation::kSum)));
  CheckOk(replica.CreateVariable(Variable("none", VariableAggregation::kNone)));
  const std::vector<MirroredWrite> bad = {{"none", false, Vec({1, 1})}};
  CHECK(replica.PackWrites(bad, 0, 2).status().code() == absl::StatusCode::kInvalidArgument);
  const std::vector<MirroredWrite> unknown = {{"nothing", false, Vec({1, 1})}};
  CHECK_FALSE(replica.PackWrites(unknown, 0, 2).ok());
  const std::vector<MirroredWrite> wide = {{"sum", false, Vec({1, 1, 1})}};
  CHECK(replica.PackWrites(wide, 0, 2).status().code() == absl::StatusCode::kInvalidArgument);

  const std::vector<MirroredWrite> good = {{"sum", false, Vec({4, 5})}};
  const std::vector<float> short_sum = {4};
  CHECK(replica.ApplyWrites(good, short_sum).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ValueOf(replica, "sum") == std::vector<float>{1, 1});
}

TEST_CASE("a variable's slice is its whole value, a parameter's also the optimizer's slots") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("v", VariableAggregation::kSum)));
  const TensorSlice v = ValueOrDie(replica.Slice("v"));
  CHECK(v.variable == "v");
  CHECK(v.full_shape == Shape{2});
  CHECK(v.row_offset == 0);
  CHECK(Values(v.value) == std::vector<float>{1, 1});
  CHECK(v.slots.empty());

  const TensorSlice table = ValueOrDie(replica.Slice(kTable));
  CHECK(table.full_shape == Shape{5, 4});
  CHECK(Values(table.value) == ValueOf(replica, kTable));
  CHECK(table.slot_names == replica.trainer().optimizer().SlotNames());
  CHECK(table.slots.size() == table.slot_names.size());
  CHECK(table.step == 0);

  CHECK(replica.Slice("nothing").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("a replica saves a variable as its slice, straight from its memory") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("v", VariableAggregation::kSum)));
  testing::KeptSlices store;
  const CheckpointId checkpoint{RunId::Random(), 7};

  const SavedSlice table =
      ValueOrDie(replica.Save(kTable, SaveOp{"/ckpt", "t.slice", checkpoint}, store));
  CHECK(table.ref.file == "t.slice");
  CHECK(table.ref.row_offset == 0);
  CHECK(table.ref.rows == 5);
  CHECK(table.slot_names == replica.trainer().optimizer().SlotNames());
  REQUIRE(table.optimizer.has_value());
  CHECK(table.optimizer->name == "adagrad");
  const TensorSlice& written = store.written.at("/ckpt/t.slice");
  const TensorSlice expected = ValueOrDie(replica.Slice(kTable));
  CHECK(written.variable == kTable);
  CHECK(written.checkpoint == checkpoint);
  CHECK(Values(written.value) == Values(expected.value));
  REQUIRE(written.slots.size() == expected.slots.size());
  for (size_t i = 0; i < written.slots.size(); ++i) {
    CHECK(Values(written.slots[i]) == Values(expected.slots[i]));
  }

  // A variable created under the strategy has no optimizer, and no slots.
  const SavedSlice v = ValueOrDie(replica.Save("v", SaveOp{"/ckpt", "v.slice", checkpoint}, store));
  CHECK_FALSE(v.optimizer.has_value());
  CHECK(v.slot_names.empty());
  CHECK(Values(store.written.at("/ckpt/v.slice").value) == std::vector<float>{1, 1});

  CHECK(replica.Save("nothing", SaveOp{"/ckpt", "n.slice", checkpoint}, store).status().code() ==
        absl::StatusCode::kNotFound);
  store.fail = true;
  const absl::Status failed =
      replica.Save("v", SaveOp{"/ckpt", "w.slice", checkpoint}, store).status();
  CHECK(failed.code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(failed.message(), "saving v"));
}

TEST_CASE("a slice loads back into a replica: values, and a parameter's slots and step") {
  MirroredReplica source = Replica();
  CheckOk(source.CreateVariable(Variable("v", VariableAggregation::kSum)));
  TensorSlice v = ValueOrDie(source.Slice("v"));
  v.value = Vec({8, 9});
  TensorSlice table = ValueOrDie(source.Slice(kTable));
  table.value = Tensor(Shape{5, 4}, 0.25f);
  for (Tensor& slot : table.slots) slot = Tensor(Shape{5, 4}, 0.5f);
  table.step = 17;

  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("v", VariableAggregation::kSum)));
  CheckOk(replica.Load(v));
  CHECK(ValueOf(replica, "v") == std::vector<float>{8, 9});
  CheckOk(replica.Load(table));
  const TensorSlice loaded = ValueOrDie(replica.Slice(kTable));
  CHECK(Values(loaded.value) == std::vector<float>(20, 0.25f));
  REQUIRE(loaded.slots.size() == table.slots.size());
  for (const Tensor& slot : loaded.slots) CHECK(Values(slot) == std::vector<float>(20, 0.5f));
  CHECK(loaded.step == 17);

  // Without slots the value alone is restored and the slots kept.
  TensorSlice bare = table;
  bare.value = Tensor(Shape{5, 4}, 2.0f);
  bare.slot_names.clear();
  bare.slots.clear();
  bare.step = 0;
  CheckOk(replica.Load(bare));
  const TensorSlice kept = ValueOrDie(replica.Slice(kTable));
  CHECK(Values(kept.value) == std::vector<float>(20, 2.0f));
  for (const Tensor& slot : kept.slots) CHECK(Values(slot) == std::vector<float>(20, 0.5f));
  CHECK(kept.step == 17);
}

TEST_CASE("a slice that is not the whole variable, or not this optimizer's, changes nothing") {
  MirroredReplica replica = Replica();
  CheckOk(replica.CreateVariable(Variable("v", VariableAggregation::kSum)));
  const TensorSlice table = ValueOrDie(replica.Slice(kTable));
  const TensorSlice v = ValueOrDie(replica.Slice("v"));

  struct Case {
    const char* what;
    TensorSlice slice;
    absl::StatusCode code;
  };
  std::vector<Case> cases;
  TensorSlice partial = table;
  partial.row_offset = 1;
  partial.value = Tensor(Shape{4, 4}, 3.0f);
  cases.push_back({"a partial slice", partial, absl::StatusCode::kInvalidArgument});
  TensorSlice wide = v;
  wide.value = Tensor(Shape{3}, 3.0f);
  cases.push_back({"another shape", wide, absl::StatusCode::kInvalidArgument});
  TensorSlice other_slots = table;
  other_slots.value = Tensor(Shape{5, 4}, 3.0f);
  other_slots.slot_names = {"m", "v"};
  other_slots.slots = {Tensor(Shape{5, 4}, 3.0f), Tensor(Shape{5, 4}, 3.0f)};
  cases.push_back({"another optimizer's slots", other_slots, absl::StatusCode::kInvalidArgument});
  TensorSlice unknown = v;
  unknown.variable = "nothing";
  cases.push_back({"an unknown name", unknown, absl::StatusCode::kNotFound});

  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK(replica.Load(c.slice).code() == c.code);
    const TensorSlice now_table = ValueOrDie(replica.Slice(kTable));
    CHECK(Values(now_table.value) == Values(table.value));
    for (size_t i = 0; i < table.slots.size(); ++i) {
      CHECK(Values(now_table.slots[i]) == Values(table.slots[i]));
    }
    CHECK(ValueOf(replica, "v") == Values(v.value));
  }
}

}  // namespace
}  // namespace tessera
