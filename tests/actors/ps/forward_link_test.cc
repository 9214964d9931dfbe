// Note [A node's forwards travel together] (actors/ps/forward_link.h): a PS node's forward link
// sends the forwards waiting in its mailbox to the backups' node as one batch, in order, and
// answers each with its own replies.
#include "actors/ps/forward_link.h"

#include <doctest/doctest.h>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using testing::DeterministicSystem;

// What a stand-in for the backups' node saw: each batch's calls' shard ids, in order.
struct PeerRecords {
  std::vector<std::vector<uint64_t>> batches;
  // Calls to this shard id are answered with an error.
  uint64_t failing_shard = 0;
  // When false, the peer takes batches and never answers.
  bool answers = true;
};

// Answers each call of a batch with ShardVersion{its position in the batch} (an error for
// `failing_shard`).
caf::behavior Peer(caf::event_based_actor* self, PeerRecords* records) {
  return {
      [self, records](batch_atom,
                      std::vector<ShardCall>& calls) -> caf::result<std::vector<ShardReply>> {
        std::vector<uint64_t> ids;
        std::vector<ShardReply> replies(calls.size());
        for (size_t k = 0; k < calls.size(); ++k) {
          ids.push_back(calls[k].shard);
          if (calls[k].shard == records->failing_shard) {
            replies[k].error = StatusToError(absl::UnavailableError("no such shard"));
          } else {
            replies[k].result = ShardVersion{static_cast<int64_t>(k)};
          }
        }
        records->batches.push_back(std::move(ids));
        if (!records->answers) return self->make_response_promise<std::vector<ShardReply>>();
        return replies;
      },
  };
}

// A shard stand-in: only its actor id matters (calls name backups by id).
caf::actor SpawnBackup(DeterministicSystem& fixture) {
  return fixture.Track(fixture.system().spawn(
      [](caf::event_based_actor*, int) -> caf::behavior { return {[](int) {}}; }, 0));
}

ShardOp Gradient(int64_t rows) {
  return ApplySparseGradientOp{IndexedSlices{Ids(rows, 0), Tensor(Shape{rows, 2}, 1.0f)}};
}

using Replies = absl::StatusOr<std::vector<ShardReply>>;

// A link to a stand-in for the backups' node, and two backups there, in a deterministic system.
struct LinkFixture {
  DeterministicSystem fixture;
  PeerRecords records;
  caf::actor peer = fixture.Track(fixture.system().spawn(Peer, &records));
  forward_link link =
      fixture.Track(fixture.system().spawn(ForwardLink, caf::actor_cast<batch_server>(peer)));
  caf::actor a = SpawnBackup(fixture);
  caf::actor b = SpawnBackup(fixture);
};

// Sends `link` one forward per entry of `forwards` (a backup and its ops), all before the link
// runs; each answer lands in `answers` at the forward's position.
void SendForwards(DeterministicSystem& fixture, const forward_link& link,
                  std::vector<std::pair<caf::actor, std::vector<ShardOp>>> forwards,
                  std::vector<std::optional<Replies>>* answers) {
  answers->assign(forwards.size(), std::nullopt);
  fixture.system().spawn(
      [link, forwards = std::move(forwards), answers](caf::event_based_actor* self, int) mutable {
        for (size_t k = 0; k < forwards.size(); ++k) {
          self->request(link, caf::infinite, forward_atom::value, forwards[k].first,
                        std::move(forwards[k].second))
              .then([answers, k](std::vector<ShardReply>& r) { (*answers)[k] = std::move(r); },
                    [answers, k](caf::error& e) { (*answers)[k] = ErrorToStatus(e); });
        }
      },
      0);
}

std::vector<int64_t> Versions(const Replies& replies) {
  std::vector<int64_t> versions;
  for (const ShardReply& reply : *replies) {
    versions.push_back(reply.error ? -1 : std::get<ShardVersion>(reply.result).version);
  }
  return versions;
}

TEST_CASE("a forward link sends what waits in its mailbox as one batch, answering each forward") {
  LinkFixture f;
  DeterministicSystem& fixture = f.fixture;
  PeerRecords& records = f.records;
  const caf::actor &a = f.a, &b = f.b;
  const caf::actor gone = SpawnBackup(fixture);
  records.failing_shard = gone.id();
  std::vector<std::optional<Replies>> answers;
  SendForwards(fixture, f.link,
               {{a, {Gradient(1), Gradient(2)}}, {b, {Gradient(3)}}, {gone, {Gradient(1)}}},
               &answers);
  fixture.Run();
  REQUIRE(records.batches.size() == 1);
  CHECK(records.batches[0] == std::vector<uint64_t>{a.id(), a.id(), b.id(), gone.id()});
  REQUIRE(answers[0].has_value());
  REQUIRE(answers[1].has_value());
  REQUIRE(answers[2].has_value());
  CHECK(Versions(*answers[0]) == std::vector<int64_t>{0, 1});
  CHECK(Versions(*answers[1]) == std::vector<int64_t>{2});
  // The failed call is its own forward's error, in its reply (the shard's LoseBackup reads it).
  CHECK(Versions(*answers[2]) == std::vector<int64_t>{-1});

  // A forward sent later, alone, goes at once in a batch of its own.
  SendForwards(fixture, f.link, {{b, {Gradient(1)}}}, &answers);
  fixture.Run();
  REQUIRE(records.batches.size() == 2);
  CHECK(records.batches[1] == std::vector<uint64_t>{b.id()});
  REQUIRE(answers[0].has_value());
  CHECK(Versions(*answers[0]) == std::vector<int64_t>{0});
}

TEST_CASE("a forward link keeps its batches small: a large forward goes in a batch of its own") {
  LinkFixture f;
  const caf::actor &a = f.a, &b = f.b;
  TensorSlice part;  // 12 MiB of rows, as a rebuild's part may carry
  part.value = Tensor(Shape{3 << 20, 1}, 1.0f);
  std::vector<std::optional<Replies>> answers;
  SendForwards(f.fixture, f.link,
               {{a, {Gradient(1)}}, {b, {RestoreOp{std::move(part), {}}}}, {a, {Gradient(2)}}},
               &answers);
  f.fixture.Run();
  REQUIRE(f.records.batches.size() == 3);
  CHECK(f.records.batches[0] == std::vector<uint64_t>{a.id()});
  CHECK(f.records.batches[1] == std::vector<uint64_t>{b.id()});
  CHECK(f.records.batches[2] == std::vector<uint64_t>{a.id()});
  for (const auto& answer : answers) {
    REQUIRE(answer.has_value());
    CHECK(answer->ok());
  }
}

TEST_CASE("a forward link whose peer goes down fails what waits for it and exits") {
  LinkFixture f;
  DeterministicSystem& fixture = f.fixture;
  const PeerRecords& records = f.records;
  f.records.answers = false;
  const caf::actor& a = f.a;
  const forward_link link = f.link;
  std::optional<caf::exit_reason> link_exit;
  // (Kept: an actor nobody references is gone.)
  const caf::actor watcher = fixture.Track(fixture.system().spawn(
      [&link_exit, link](caf::event_based_actor* self, int) -> caf::behavior {
        self->monitor(link);
        self->set_down_handler([&link_exit](caf::down_msg& down) {
          link_exit = static_cast<caf::exit_reason>(down.reason.code());
        });
        return {[](int) {}};
      },
      0));
  std::vector<std::optional<Replies>> answers;
  SendForwards(fixture, link, {{a, {Gradient(1)}}}, &answers);
  fixture.Run();
  REQUIRE(records.batches.size() == 1);
  CHECK_FALSE(answers[0].has_value());  // the peer holds it
  caf::anon_send_exit(f.peer, caf::exit_reason::kill);
  fixture.Run();
  REQUIRE(answers[0].has_value());
  CHECK(answers[0]->status().code() == absl::StatusCode::kUnavailable);
  CHECK(answers[0]->status().message().find("went down") != std::string::npos);
  REQUIRE(link_exit.has_value());
  CHECK(*link_exit == caf::exit_reason::kill);
}

}  // namespace
}  // namespace tessera
