// mutual_connect: how often CAF 0.17's middleman loses a live node when two nodes connect to
// each other at the same moment (Note [Two PS nodes never connect to each other at once],
// coordinator/ps/backups.cc).
//
// Each round starts two actor systems with Tessera's network timings (heartbeat 250 ms,
// connection timeout 2 s), publishes an actor on each, connects each to the other — at the same
// moment, or with --one_way one after the other — monitors the other's actor from each side,
// stays quiet for --quiet_ms, then sends one request across. A round is lost when a monitor fires
// (no node died) or the request goes unanswered. The last line is JSON.
//
//   build/bench/mutual_connect --rounds=40
//   build/bench/mutual_connect --rounds=40 --one_way
#include <atomic>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(int, rounds, 20, "rounds, each with two fresh actor systems");
ABSL_FLAG(bool, one_way, false, "connect one way first, then the other (the fix)");
ABSL_FLAG(int, quiet_ms, 3500, "how long both stay quiet after connecting (> the 2 s timeout)");

namespace {

struct Config : caf::actor_system_config {
  Config() {
    load<caf::io::middleman>();
    set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(250)});
    set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(2)});
    set("logger.console-verbosity", caf::atom("quiet"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

caf::behavior Echo(caf::event_based_actor*) {
  return {[](int x) { return x; }};
}

// Counts the down messages of `target` in `downs`.
caf::actor Watch(caf::actor_system& system, const caf::actor& target, std::atomic<int>& downs) {
  return system.spawn([&downs, target](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(target);
    self->set_down_handler([&downs](caf::down_msg&) { ++downs; });
    return {[](int) {}};
  });
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const bool one_way = absl::GetFlag(FLAGS_one_way);
  int lost = 0;
  int failed = 0;
  for (int round = 0; round < rounds; ++round) {
    Config config_a;
    Config config_b;
    caf::actor_system a{config_a};
    caf::actor_system b{config_b};
    const caf::actor echo_a = a.spawn(Echo);
    const caf::actor echo_b = b.spawn(Echo);
    const caf::expected<uint16_t> port_a = a.middleman().publish(echo_a, 0, "127.0.0.1");
    const caf::expected<uint16_t> port_b = b.middleman().publish(echo_b, 0, "127.0.0.1");
    caf::expected<caf::actor> a_to_b{caf::sec::none};
    caf::expected<caf::actor> b_to_a{caf::sec::none};
    if (!port_a || !port_b) {
      ++failed;
    } else if (one_way) {
      a_to_b = a.middleman().remote_actor("127.0.0.1", *port_b);
      b_to_a = b.middleman().remote_actor("127.0.0.1", *port_a);
    } else {
      std::atomic<int> ready{0};
      auto connect = [&ready](caf::actor_system& from, uint16_t port,
                              caf::expected<caf::actor>& out) {
        ++ready;
        while (ready.load() < 2) {
        }
        out = from.middleman().remote_actor("127.0.0.1", port);
      };
      std::thread first([&] { connect(a, *port_b, a_to_b); });
      std::thread second([&] { connect(b, *port_a, b_to_a); });
      first.join();
      second.join();
    }
    if (!a_to_b || !b_to_a) {
      ++failed;
      std::printf("round %d: could not connect\n", round);
    } else {
      std::atomic<int> downs{0};
      const caf::actor watch_a = Watch(a, *a_to_b, downs);
      const caf::actor watch_b = Watch(b, *b_to_a, downs);
      std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_quiet_ms)));
      bool answered = false;
      caf::scoped_actor self{a};
      self->request(*a_to_b, std::chrono::seconds(2), 7)
          .receive([&answered](int) { answered = true; }, [](caf::error&) {});
      const bool round_lost = downs.load() > 0 || !answered;
      lost += round_lost;
      std::printf("round %d: %d down message(s) of a live node, request %s\n", round, downs.load(),
                  answered ? "answered" : "unanswered");
      caf::anon_send_exit(watch_a, caf::exit_reason::kill);
      caf::anon_send_exit(watch_b, caf::exit_reason::kill);
    }
    caf::anon_send_exit(echo_a, caf::exit_reason::kill);
    caf::anon_send_exit(echo_b, caf::exit_reason::kill);
  }
  std::printf("%s: %d of %d rounds lost the other node\n",
              one_way ? "one way first" : "both ways at once", lost, rounds - failed);
  std::printf("{\"one_way\": %s, \"rounds\": %d, \"lost\": %d, \"not_connected\": %d}\n",
              one_way ? "true" : "false", rounds - failed, lost, failed);
  return 0;
}
