// The worker actor on its own, under the deterministic scheduler: it runs registered replica
// functions on a closure's arguments and replies with their result or error, and keeps
// per-worker resources that live and die with it.
#include "actors/scheduling/worker_actor.h"

#include <doctest/doctest.h>

#include "absl/strings/str_cat.h"

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "actors/base/messages.h"
#include "actors/scheduling/replica.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using testing::DeterministicSystem;

// A closure of `function` whose arguments are the numbers x0, x1, ...
Closure MakeClosure(std::string function, std::vector<double> numbers = {}) {
  Closure closure;
  closure.id = 1;
  closure.function = std::move(function);
  for (size_t k = 0; k < numbers.size(); ++k) closure.args.Set(absl::StrCat("x", k), numbers[k]);
  return closure;
}

// A per-worker resource that counts the closures that used it.
struct Tally {
  int uses = 0;
};

// "sum": replies with the sum of its scalar arguments and the worker's index.
// "fail": replies with InvalidArgument.
// "count_use": bumps the worker's Tally and replies with its count; `builds` counts Tally builds.
std::shared_ptr<const FunctionRegistry> TestRegistry(std::shared_ptr<int> builds) {
  auto registry = std::make_shared<FunctionRegistry>();
  REQUIRE(registry
              ->AddReplicaFunction("sum",
                                   [](ReplicaContext& ctx, const ClosureValues& args,
                                      Done<ClosureValues> done) {
                                     double sum = 0;
                                     for (size_t k = 0; args.Has(absl::StrCat("x", k)); ++k) {
                                       sum += *args.Get<double>(absl::StrCat("x", k));
                                     }
                                     ClosureValues out;
                                     out.Set("sum", sum).Set("worker", int64_t{ctx.worker().index});
                                     done(std::move(out));
                                   })
              .ok());
  REQUIRE(registry
              ->AddReplicaFunction("fail",
                                   [](ReplicaContext&, const ClosureValues&,
                                      Done<ClosureValues> done) {
                                     done(absl::InvalidArgumentError("bad batch"));
                                   })
              .ok());
  REQUIRE(registry
              ->AddResource<Tally>("tally",
                                   [builds](const WorkerInfo&) -> absl::StatusOr<Tally> {
                                     ++*builds;
                                     return Tally{};
                                   })
              .ok());
  REQUIRE(registry
              ->AddReplicaFunction("count_use",
                                   [](ReplicaContext& ctx, const ClosureValues&,
                                      Done<ClosureValues> done) {
                                     absl::StatusOr<Tally*> tally = ctx.Resource<Tally>("tally");
                                     if (!tally.ok()) return done(tally.status());
                                     ClosureValues out;
                                     out.Set("uses", int64_t{++(*tally)->uses});
                                     done(std::move(out));
                                   })
              .ok());
  return registry;
}

TEST_CASE("a worker runs the registered replica function on the closure's arguments") {
  DeterministicSystem fixture;
  worker_actor worker = fixture.Track(SpawnWorker(
      fixture.system(), WorkerInfo{2, 3}, TestRegistry(std::make_shared<int>(0))));
  absl::StatusOr<ClosureValues> reply =
      fixture.Ask<ClosureValues>(worker, run_atom::value, MakeClosure("sum", {1.5, 2.0, 4.0}));
  REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
  CHECK(*reply->Get<double>("sum") == 7.5);
  CHECK(*reply->Get<int64_t>("worker") == 2);
}

TEST_CASE("a closure naming an unregistered function gets NotFound naming it") {
  DeterministicSystem fixture;
  worker_actor worker = fixture.Track(SpawnWorker(
      fixture.system(), WorkerInfo{0, 1}, TestRegistry(std::make_shared<int>(0))));
  absl::StatusOr<ClosureValues> reply =
      fixture.Ask<ClosureValues>(worker, run_atom::value, MakeClosure("no_such_step"));
  CHECK(absl::IsNotFound(reply.status()));
  CHECK_MESSAGE(absl::StrContains(reply.status().message(), "no_such_step"), reply.status());
}

TEST_CASE("a replica function's error is the worker's error reply, code and message intact") {
  DeterministicSystem fixture;
  worker_actor worker = fixture.Track(SpawnWorker(
      fixture.system(), WorkerInfo{0, 1}, TestRegistry(std::make_shared<int>(0))));
  absl::StatusOr<ClosureValues> reply =
      fixture.Ask<ClosureValues>(worker, run_atom::value, MakeClosure("fail"));
  CHECK(absl::IsInvalidArgument(reply.status()));
  CHECK_MESSAGE(absl::StrContains(reply.status().message(), "bad batch"), reply.status());
  // The worker carries on after an error.
  CHECK(fixture.Ask<ClosureValues>(worker, run_atom::value, MakeClosure("sum", {1})).ok());
}

TEST_CASE("a per-worker resource is built once and shared by the worker's closures") {
  DeterministicSystem fixture;
  auto builds = std::make_shared<int>(0);
  worker_actor worker =
      fixture.Track(SpawnWorker(fixture.system(), WorkerInfo{0, 1}, TestRegistry(builds)));
  for (int64_t expected : {1, 2, 3}) {
    absl::StatusOr<ClosureValues> reply =
        fixture.Ask<ClosureValues>(worker, run_atom::value, MakeClosure("count_use"));
    REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
    CHECK(*reply->Get<int64_t>("uses") == expected);
  }
  CHECK(*builds == 1);
}

TEST_CASE("a worker's resources die with it: its replacement builds its own") {
  DeterministicSystem fixture;
  auto builds = std::make_shared<int>(0);
  std::shared_ptr<const FunctionRegistry> registry = TestRegistry(builds);
  worker_actor first = fixture.Track(SpawnWorker(fixture.system(), WorkerInfo{0, 1}, registry));
  REQUIRE(fixture.Ask<ClosureValues>(first, run_atom::value, MakeClosure("count_use")).ok());
  REQUIRE(fixture.Ask<ClosureValues>(first, run_atom::value, MakeClosure("count_use")).ok());
  caf::anon_send_exit(first, caf::exit_reason::kill);
  fixture.Run();

  worker_actor replacement =
      fixture.Track(SpawnWorker(fixture.system(), WorkerInfo{0, 1}, registry));
  absl::StatusOr<ClosureValues> reply =
      fixture.Ask<ClosureValues>(replacement, run_atom::value, MakeClosure("count_use"));
  REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
  CHECK(*reply->Get<int64_t>("uses") == 1);  // a fresh Tally, not the dead worker's
  CHECK(*builds == 2);
}

}  // namespace
}  // namespace tessera
