#include "cluster/network/transport.h"

#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/function_view.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <iterator>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/base/messages.h"
#include "cluster/network/internal/guarded_connection.h"
#include "cluster/network/internal/transport_state.h"

namespace tessera {

// Note [Why a transport of Tessera's own]
// CAF 0.17 has no maximum message size, no handshake deadline and no hook in its BASP broker's
// reads; caf_openssl's connections are private classes. What it does offer is its middleman
// actor (caf/io/middleman_actor_impl.hpp), whose connect() and open() make the connections a
// node publishes and connects through, and the public building blocks of a connection (the
// stream and its protocol policy, the doorman, caf::openssl::session). The transport is a
// middleman actor of that kind whose connections are guarded; BASP, serialization and the
// handshake stay CAF's. PublishNode and ConnectToNode use it instead of CAF's middleman actor
// and caf::openssl::publish/remote_actor.

namespace {

using caf::io::network::native_socket;
using transport_internal::MakeConnection;
using State = Transport::State;

// How much longer than the handshake timeout a connect may take to be answered: the TCP
// connect itself, on a loaded machine.
constexpr absl::Duration kConnectAnswerSlack = absl::Seconds(5);

std::string PeerOf(native_socket fd) {
  caf::expected<std::string> host = caf::io::network::remote_addr_of_fd(fd);
  caf::expected<uint16_t> port = caf::io::network::remote_port_of_fd(fd);
  return absl::StrCat(host ? *host : "?", ":", port ? *port : 0);
}

// Accepts connections as guarded ones, at most kMaxUnadmittedConnections not yet admitted.
class GuardedDoorman final : public caf::io::network::doorman_impl {
 public:
  GuardedDoorman(std::shared_ptr<State> state, native_socket fd)
      : doorman_impl(state->mpx, fd), state_(std::move(state)) {}

  bool new_connection() override {
    if (detached()) return false;
    const native_socket fd = acceptor_.accepted_socket();
    std::string peer = PeerOf(fd);
    if (state_->watched.size() >= kMaxUnadmittedConnections) {
      caf::io::network::close_socket(fd);
      state_->Warn(absl::StrCat("closed the connection from ", peer, ": ",
                                kMaxUnadmittedConnections,
                                " connections are waiting for their version handshake"));
      return true;
    }
    caf::expected<caf::io::scribe_ptr> connection =
        MakeConnection(state_, fd, std::move(peer), /*outgoing=*/false);
    if (!connection) return true;
    const caf::io::connection_handle hdl = (*connection)->hdl();
    parent()->add_scribe(std::move(*connection));
    return doorman::new_connection(&acceptor_.backend(), hdl);
  }

 private:
  std::shared_ptr<State> state_;
};

// Note [The transport's middleman ends with BASP, on its own thread]
// The middleman actor below runs detached (a connect blocks), and the actor system waits for
// every detached thread after stopping its modules. CAF stops its own middleman actor there
// explicitly; ours must end when the BASP broker does. The warden (an actor on the scheduler)
// used to be the only one to end it, on the broker's down message; but the middleman module
// stops before the scheduler, and a scheduler thread can take its shutdown job ahead of that
// down message (stolen from the queue the message waits in), which then never runs: the
// system's destructor waited for this thread for ever (a test timed out once in CI, at the end
// of a networked test). So the broker itself, as it terminates, sends the middleman its kill
// (a functor attached to the broker: one way, unlike a link, whose exit would also reach the
// broker), which the middleman's own thread handles; the warden's kill stays as the second way.

// CAF's middleman actor (publish, connect, the cache of connected endpoints) making guarded
// connections. Note [Why a transport of Tessera's own].
class GuardedMiddleman final : public caf::io::middleman_actor_impl {
 public:
  GuardedMiddleman(caf::actor_config& cfg, caf::actor basp, std::shared_ptr<State> state)
      : middleman_actor_impl(cfg, std::move(basp)), state_(std::move(state)) {}

  const char* name() const override { return "tessera.transport"; }

  void on_exit() override {
    middleman_actor_impl::on_exit();
    state_.reset();  // the state holds this actor's handle
  }

 protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host, uint16_t port) override {
    caf::expected<native_socket> fd = caf::io::network::new_tcp_connection(host, port);
    if (!fd) return std::move(fd.error());
    return MakeConnection(state_, *fd, absl::StrCat(host, ":", port), /*outgoing=*/true);
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr, bool reuse) override {
    caf::expected<native_socket> fd = caf::io::network::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd) return std::move(fd.error());
    return caf::make_counted<GuardedDoorman>(state_, *fd);
  }

 private:
  std::shared_ptr<State> state_;
};

// Wakes the multiplexer to expire connections past their handshake deadline, and ends the
// transport's middleman actor when the BASP broker goes (the middleman module stops it).
caf::behavior Warden(caf::event_based_actor* self, std::weak_ptr<State> weak, caf::actor basp) {
  self->monitor(basp);
  self->set_down_handler([self, weak](caf::down_msg&) {
    if (std::shared_ptr<State> state = weak.lock()) {
      self->send_exit(state->TakeMiddleman(), caf::exit_reason::kill);
      state->warden = nullptr;
    }
    self->quit();
  });
  return {
      [weak](sweep_atom) {
        std::shared_ptr<State> state = weak.lock();
        if (state == nullptr) return;
        state->mpx.post([weak] {
          if (std::shared_ptr<State> alive = weak.lock()) alive->Sweep();
        });
      },
  };
}

// One transport per actor system.
absl::Mutex registry_mu(absl::kConstInit);
std::map<caf::actor_system*, std::weak_ptr<State>>& Registry()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* registry = new std::map<caf::actor_system*, std::weak_ptr<State>>();
  return *registry;
}

}  // namespace

Transport Transport::Of(caf::actor_system& system, const NetworkOptions& options) {
  absl::MutexLock lock(&registry_mu);
  auto& registry = Registry();
  for (auto it = registry.begin(); it != registry.end();) {  // systems that are gone
    it = it->second.expired() ? registry.erase(it) : std::next(it);
  }
  std::weak_ptr<State>& entry = registry[&system];
  if (std::shared_ptr<State> state = entry.lock()) return Transport(std::move(state));
  auto state = std::make_shared<State>(system, options);
  caf::actor basp = system.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  {
    absl::MutexLock state_lock(&state->mu);
    state->middleman = system.spawn<GuardedMiddleman, caf::detached + caf::hidden>(basp, state);
    // Note [The transport's middleman ends with BASP, on its own thread].
    caf::actor_cast<caf::abstract_actor*>(basp)->attach_functor(
        [middleman = state->middleman.address()] {
          caf::anon_send_exit(middleman, caf::exit_reason::kill);
        });
  }
  state->warden = system.spawn<caf::hidden>(Warden, std::weak_ptr<State>(state), basp);
  entry = state;
  return Transport(std::move(state));
}

caf::expected<uint16_t> Transport::Publish(const caf::actor& whom, uint16_t port,
                                           const std::string& bind) const {
  caf::io::middleman_actor middleman = state_->Middleman();
  if (!middleman) return caf::sec::cannot_open_port;
  auto f = caf::make_function_view(middleman);
  return f(caf::publish_atom::value, port, caf::actor_cast<caf::strong_actor_ptr>(whom),
           state_->system.message_types(whom), bind, /*reuse=*/true);
}

caf::expected<caf::actor> Transport::Connect(const NodeAddress& address) const {
  caf::io::middleman_actor middleman = state_->Middleman();
  if (!middleman) return caf::sec::cannot_connect_to_node;
  // The middleman answers once the handshake is done or has failed (handshake_timeout); the
  // bound only keeps a lost answer from blocking the caller forever, which then tries again.
  auto f = caf::make_function_view(
      middleman, caf::duration(std::chrono::milliseconds(
                     absl::ToInt64Milliseconds(state_->handshake_timeout + kConnectAnswerSlack))));
  auto found = f(caf::connect_atom::value, address.host, address.port);
  if (!found && found.error() == caf::sec::request_timeout) return caf::sec::connection_timeout;
  if (!found) return std::move(found.error());
  caf::strong_actor_ptr& published = std::get<1>(*found);
  if (published == nullptr) return caf::sec::no_actor_published_at_port;
  return caf::actor_cast<caf::actor>(std::move(published));
}

void Transport::Admit(const caf::node_id& peer) const { state_->Admit(peer); }

std::optional<ConnectionFailure> Transport::TakeFailure(const NodeAddress& address) const {
  return state_->TakeFailure(address.ToString());
}

}  // namespace tessera
