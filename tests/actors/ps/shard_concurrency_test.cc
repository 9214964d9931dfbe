// Shard actors on CAF's real (threaded) scheduler: concurrent writers are serialized by the
// mailbox, so no update is lost.
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <vector>

#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "actors/ps/ps_node_actor.h"
#include "actors/ps/shard_actor.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using done_atom = caf::atom_constant<caf::atom("done")>;

constexpr auto kTimeout = std::chrono::seconds(30);

// Sends `updates` scatter_adds of `weight` to rows `ids` of `shard` without waiting in between,
// then tells `report` how many were acknowledged and quits.
void Writer(caf::event_based_actor* self, shard_actor shard, caf::actor report, Ids ids,
            float weight, int updates) {
  auto acked = std::make_shared<int>(0);
  for (int u = 0; u < updates; ++u) {
    IndexedSlices rows{ids, Tensor(Shape{static_cast<int64_t>(ids.size()), 4}, weight)};
    self->request(shard, caf::infinite, ShardOp(ScatterRowsOp{ScatterOp::kAdd, std::move(rows)}))
        .then(
            [=](ShardOpResult&) {
              if (++*acked == updates) {
                self->send(report, done_atom::value, *acked);
                self->quit();
              }
            },
            [=](caf::error&) {
              self->send(report, done_atom::value, -1);
              self->quit();
            });
  }
}

TEST_CASE("concurrent scatter_adds from several actors on the threaded scheduler sum exactly") {
  caf::actor_system_config cfg;
  RegisterTesseraTypes(cfg);
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  caf::actor_system system(cfg);
  {
    caf::scoped_actor self(system);
    const ps_node_actor node = SpawnPsNode(system, 0);
    ShardSpec spec = testing::TestShardSpec(0, 1, 6, 4);
    spec.initializer = InitializerSpec{"zeros", {}, 0};
    shard_actor shard;
    self->request(node, kTimeout, create_shard_atom::value, spec, caf::actor())
        .receive([&](shard_actor& created) { shard = created; },
                 [&](caf::error& err) { FAIL(ErrorToStatus(err).ToString()); });

    // Writer w adds (w + 1) to rows {w % 6, 5, 5} (row 5 twice per update) `kUpdates` times.
    constexpr int kWriters = 6, kUpdates = 200;
    std::vector<double> want(6, 0.0);
    for (int w = 0; w < kWriters; ++w) {
      const Ids ids = {w % 6, 5, 5};
      for (int64_t id : ids) want[id] += static_cast<double>(w + 1) * kUpdates;
      system.spawn(Writer, shard, caf::actor(self), ids, static_cast<float>(w + 1), kUpdates);
    }
    int acked = 0;
    for (int w = 0; w < kWriters; ++w) {
      self->receive([&](done_atom, int n) { acked += n; },
                    caf::after(kTimeout) >> [&] { FAIL("a writer did not finish"); });
    }
    CHECK(acked == kWriters * kUpdates);

    self->request(shard, kTimeout, ShardOp(ReadOp{}))
        .receive(
            [&](ShardOpResult& result) {
              const ShardValue& value = std::get<ShardValue>(result);
              CHECK(value.version == kWriters * kUpdates);
              for (int64_t r = 0; r < 6; ++r) {
                for (int64_t j = 0; j < 4; ++j) {
                  CHECK(value.value.row(r)[j] == static_cast<float>(want[r]));
                }
              }
            },
            [&](caf::error& err) { FAIL(ErrorToStatus(err).ToString()); });

    self->send_exit(node, caf::exit_reason::user_shutdown);  // takes the shard down too
  }
}

}  // namespace
}  // namespace tessera
