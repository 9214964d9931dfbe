// The worker actor on its own, under the deterministic scheduler: it runs registered replica
// functions on a closure's arguments and replies with their result or error, and keeps
// per-worker resources that live and die with it.
#include "actors/worker_actor.h"

#include <doctest/doctest.h>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "actors/messages.h"
#include "actors/replica.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using testing::DeterministicSystem;

Closure MakeClosure(std::string function, std::vector<double> scalars = {}) {
  Closure closure;
  closure.id = 1;
  closure.function = std::move(function);
  closure.args.scalars = std::move(scalars);
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
                                     for (double x : args.scalars) sum += x;
                                     ClosureValues out;
                                     out.scalars = {sum, double(ctx.worker().index)};
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
                                     out.scalars = {double(++(*tally)->uses)};
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
  CHECK(reply->scalars == std::vector<double>{7.5, 2.0});  // the sum, then the worker's index
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
  for (double expected : {1.0, 2.0, 3.0}) {
    absl::StatusOr<ClosureValues> reply =
        fixture.Ask<ClosureValues>(worker, run_atom::value, MakeClosure("count_use"));
    REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
    CHECK(reply->scalars.at(0) == expected);
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
  CHECK(reply->scalars.at(0) == 1.0);  // a fresh Tally, not the dead worker's
  CHECK(*builds == 2);
}

}  // namespace
}  // namespace tessera
