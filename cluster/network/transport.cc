#include "cluster/network/transport.h"

#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/detail/socket_guard.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/function_view.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/io/scribe.hpp>
#include <caf/openssl/session.hpp>
#include <caf/policy/tcp.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <map>
#include <new>
#include <set>
#include <utility>
#include <vector>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/base/messages.h"
#include "cluster/network/connection_guard.h"
#include "core/base/logging.h"

namespace tessera {

// Note [Allocation follows bytes the guard allowed]
// CAF 0.17's BASP broker reads a message in two steps: a 32-byte header, then exactly the
// payload length the header announces, for which the connection's read buffer is resized (and
// zero-filled) before a single payload byte has arrived; CAF has no maximum message size. So
// each of the transport's connections screens every header before the broker sees it
// (ConnectionGuard): a length above the peer's limit closes the connection. An allowed length
// is reserved right away, inside a try: when it cannot be allocated (a node under a memory
// limit), the connection is closed rather than the process ended by an exception on CAF's I/O
// thread; for a payload of kProbeBytes or more the same is tried once more for BASP's own copy
// of it, made when the payload is handed to a deserializing worker. A read buffer grown past
// kKeptReadBufferBytes is given back once its message has been handed on (CAF would keep it for
// the life of the connection).
//
// Note [OpenSSL's error queue is per thread]
// OpenSSL records why a call failed in a queue per thread, and SSL_get_error() reports an error
// for a call that merely would block when that queue is not empty. CAF 0.17's TLS session never
// clears it (the call that would is inside a log statement compiled out of Debian's build), and
// every connection of a node is served by one I/O thread: so when one TLS connection closed
// (say a worker that finished), the next read on every other one failed and closed it too —
// the coordinator lost its PS nodes at the end of a run, and each PS dropped its shards. The
// transport's TLS connections clear the queue before every OpenSSL call and read the reason of
// a failure from it right after.
//
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

using caf::io::network::default_multiplexer;
using caf::io::network::native_socket;
using caf::io::network::operation;
using caf::io::network::rw_state;

// Notes above.
constexpr size_t kKeptReadBufferBytes = size_t{64} << 20;
constexpr uint32_t kProbeBytes = uint32_t{16} << 20;
// Warnings about closed connections: at most one a second (a flood of bad peers is one line a
// second, with a count of those not logged).
constexpr absl::Duration kWarningInterval = absl::Seconds(1);
// Admitted peers remembered; the oldest is forgotten past this (its open connections stay
// admitted; a new one says hello again, as every connection does).
constexpr size_t kRememberedPeers = 4096;
// How much longer than the handshake timeout a connect may take to be answered: the TCP
// connect itself, on a loaded machine.
constexpr absl::Duration kConnectAnswerSlack = absl::Seconds(5);

std::string OpenSslReasonText(unsigned long code) {
  char text[256] = "unknown reason";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// What a failed TLS call means, from the first error in OpenSSL's queue (0: none, the socket
// closed). `established`: whether the TLS handshake had completed. An empty reason: a plain close.
ConnectionFailure DescribeTlsFailure(unsigned long code, bool established) {
  const int reason = ERR_GET_LIB(code) == ERR_LIB_SSL ? ERR_GET_REASON(code) : 0;
  switch (reason) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_UNSUPPORTED_PROTOCOL:
      return {"the peer speaks plain TCP and this node TLS: every node of a cluster needs "
              "--tls_cert, --tls_key and --tls_ca, or none does",
              true};
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
      return {"the peer's certificate is not signed by this node's --tls_ca (" +
                  OpenSslReasonText(code) + ")",
              true};
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return {"the peer sent no certificate (a node without --tls_cert?)", true};
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
      return {"the peer refused this node's certificate: it is not signed by the CA the peer "
              "trusts (" + OpenSslReasonText(code) + ")",
              true};
    case 0:
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
      if (established) return {};
      return {"the peer closed the connection during the TLS handshake", false};
    default:
      return {absl::StrCat(established ? "TLS failed: " : "the TLS handshake failed: ",
                           OpenSslReasonText(code)),
              !established};
  }
}

std::chrono::nanoseconds ToChrono(absl::Duration d) {
  return std::chrono::nanoseconds(absl::ToInt64Nanoseconds(d));
}

}  // namespace

// One of the transport's connections, as the rest of the transport sees it.
class GuardedConnection : public caf::io::scribe {
 public:
  using caf::io::scribe::scribe;
  // Closes the connection unless its peer has been admitted meanwhile (multiplexer thread).
  virtual void ExpireUnlessAdmitted(caf::execution_unit* ctx) = 0;
};

struct Transport::State {
  State(caf::actor_system& sys, const NetworkOptions& options)
      : system(sys),
        mpx(static_cast<default_multiplexer&>(sys.middleman().backend())),
        limits{options.max_message_bytes, options.max_handshake_bytes},
        tls(options.tls()),
        handshake_timeout(options.handshake_timeout) {}

  caf::actor_system& system;
  default_multiplexer& mpx;
  const ConnectionLimits limits;
  const bool tls;
  const absl::Duration handshake_timeout;
  caf::actor warden;  // set once, right after it is spawned

  // The transport's middleman actor, until the middleman module stops (then null: the state may
  // outlive it a moment, held by connections, and must not keep the actor from being destroyed,
  // which the actor system waits for).
  caf::io::middleman_actor Middleman() {
    absl::MutexLock lock(&mu);
    return middleman;
  }
  caf::io::middleman_actor TakeMiddleman() {
    absl::MutexLock lock(&mu);
    return std::exchange(middleman, caf::io::middleman_actor());
  }

  // -- Any thread ---------------------------------------------------------------------------

  bool Admitted(const caf::node_id& peer) {
    absl::MutexLock lock(&mu);
    return admitted.count(peer) > 0;
  }
  void Admit(const caf::node_id& peer) {
    absl::MutexLock lock(&mu);
    if (!admitted.insert(peer).second) return;
    admission_order.push_back(peer);
    if (admission_order.size() > kRememberedPeers) {
      admitted.erase(admission_order.front());
      admission_order.pop_front();
    }
  }
  void NoteFailure(const std::string& endpoint, ConnectionFailure failure) {
    absl::MutexLock lock(&mu);
    failures[endpoint] = std::move(failure);
  }
  std::optional<ConnectionFailure> TakeFailure(const std::string& endpoint) {
    absl::MutexLock lock(&mu);
    auto it = failures.find(endpoint);
    if (it == failures.end()) return std::nullopt;
    ConnectionFailure out = std::move(it->second);
    failures.erase(it);
    return out;
  }
  // Logs `text` as a warning unless one was logged less than kWarningInterval ago.
  void Warn(const std::string& text) {
    int64_t unlogged = 0;
    {
      absl::MutexLock lock(&mu);
      const absl::Time now = absl::Now();
      if (now - last_warning < kWarningInterval) {
        ++unlogged_warnings;
        return;
      }
      last_warning = now;
      std::swap(unlogged, unlogged_warnings);
    }
    if (unlogged > 0) {
      Log().warn("{} ({} more closed connection(s) not logged)", text, unlogged);
    } else {
      Log().warn("{}", text);
    }
  }

  absl::Mutex mu;
  caf::io::middleman_actor middleman ABSL_GUARDED_BY(mu);
  std::set<caf::node_id> admitted ABSL_GUARDED_BY(mu);
  std::deque<caf::node_id> admission_order ABSL_GUARDED_BY(mu);
  std::map<std::string, ConnectionFailure> failures ABSL_GUARDED_BY(mu);
  absl::Time last_warning ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int64_t unlogged_warnings ABSL_GUARDED_BY(mu) = 0;

  // -- The multiplexer's thread only -------------------------------------------------------

  // Watches a connection whose peer is not admitted yet; returns its watch id.
  uint64_t Watch(GuardedConnection* connection) {
    const uint64_t id = next_watch_id++;
    watched.emplace(id, Watched{connection, absl::Now() + handshake_timeout});
    caf::delayed_anon_send(warden, ToChrono(handshake_timeout + absl::Milliseconds(10)),
                           sweep_atom::value);
    return id;
  }
  void Unwatch(uint64_t id) { watched.erase(id); }
  // Expires every watched connection whose deadline has passed.
  void Sweep() {
    const absl::Time now = absl::Now();
    std::vector<caf::intrusive_ptr<GuardedConnection>> due;
    for (const auto& [id, entry] : watched) {
      if (entry.deadline <= now) due.push_back(entry.connection);
    }
    for (const auto& connection : due) connection->ExpireUnlessAdmitted(&mpx);
  }

  struct Watched {
    caf::intrusive_ptr<GuardedConnection> connection;
    absl::Time deadline;
  };
  std::map<uint64_t, Watched> watched;
  uint64_t next_watch_id = 1;
};

namespace {

using State = Transport::State;

// -- Protocol policies (what caf::io::network::stream_impl reads and writes through) ----------

class PlainPolicy {
 public:
  static constexpr bool kTls = false;
  explicit PlainPolicy(ConnectionFailure* /*failure*/) {}
  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    return caf::policy::tcp::read_some(result, fd, buf, len);
  }
  rw_state write_some(size_t& result, native_socket fd, const void* buf, size_t len) {
    return caf::policy::tcp::write_some(result, fd, buf, len);
  }
  bool must_read_more(native_socket, size_t) { return false; }
};

// Note [OpenSSL's error queue is per thread].
class TlsPolicy {
 public:
  static constexpr bool kTls = true;
  TlsPolicy(ConnectionFailure* failure, caf::openssl::session_ptr session)
      : failure_(failure), session_(std::move(session)) {}
  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    ERR_clear_error();
    return Judge(session_->read_some(result, fd, buf, len), result);
  }
  rw_state write_some(size_t& result, native_socket fd, const void* buf, size_t len) {
    ERR_clear_error();
    return Judge(session_->write_some(result, fd, buf, len), result);
  }
  bool must_read_more(native_socket fd, size_t threshold) {
    return session_->must_read_more(fd, threshold);
  }

 private:
  rw_state Judge(rw_state state, size_t transferred) {
    if (state == rw_state::failure) {
      if (failure_->reason.empty()) *failure_ = DescribeTlsFailure(ERR_peek_error(), established_);
      ERR_clear_error();
    } else if (transferred > 0) {
      established_ = true;  // application data flows only after the TLS handshake
    }
    return state;
  }

  ConnectionFailure* failure_;
  caf::openssl::session_ptr session_;
  bool established_ = false;
};

// -- A guarded connection -------------------------------------------------------------------

template <class Policy>
class GuardedScribe final : public GuardedConnection {
 public:
  template <class... Ts>
  GuardedScribe(std::shared_ptr<State> state, native_socket fd, std::string peer, bool outgoing,
                Ts&&... policy_args)
      : GuardedConnection(caf::io::network::conn_hdl_from_socket(fd)),
        state_(std::move(state)),
        peer_(std::move(peer)),
        outgoing_(outgoing),
        guard_(state_->limits, Policy::kTls),
        stream_(state_->mpx, fd, &failure_, std::forward<Ts>(policy_args)...) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) Launch();
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    shutting_down_ = true;
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    caf::expected<std::string> x = caf::io::network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string();
  }
  uint16_t port() const override {
    caf::expected<uint16_t> x = caf::io::network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

  // One complete read (a BASP header, or the payload it announced), screened before CAF's
  // BASP broker gets it.
  bool consume(caf::execution_unit* ctx, const void* buf, size_t num_bytes) override {
    if (detached()) return false;
    received_ = true;
    const char* bytes = static_cast<const char*>(buf);
    if (!guard_.admitted() && peer_node_ && state_->Admitted(peer_node_)) BecomeAdmitted();
    absl::Status screened = guard_.Screen(absl::MakeConstSpan(bytes, num_bytes));
    if (screened.ok() && guard_.last_was_handshake_payload()) LearnPeer(ctx, bytes, num_bytes);
    if (screened.ok() && guard_.awaited_payload_bytes() > 0) {
      screened = MakeRoom(guard_.awaited_payload_bytes());
    }
    if (!screened.ok()) {
      Close(ctx, {std::string(screened.message()), absl::IsFailedPrecondition(screened)});
      return false;
    }
    const bool more = caf::io::scribe::consume(ctx, buf, num_bytes);
    if (guard_.expects_header() && stream_.rd_buf().capacity() > kKeptReadBufferBytes) {
      std::vector<char>().swap(stream_.rd_buf());  // Note [Allocation follows bytes ...]
    }
    return more;
  }

  void ExpireUnlessAdmitted(caf::execution_unit* ctx) override {
    if (detached()) return;
    if (!guard_.admitted() && peer_node_ && state_->Admitted(peer_node_)) BecomeAdmitted();
    if (guard_.admitted()) return;
    Close(ctx, {absl::StrCat("no version handshake within ",
                             absl::FormatDuration(state_->handshake_timeout)),
                false});
  }

 protected:
  // Called exactly once, whenever the connection leaves its broker: closed by the broker, by
  // the guard, or failed (the socket closed, a TLS error).
  void detach_from(caf::io::abstract_broker* broker) override {
    GuardedConnection::detach_from(broker);
    if (watch_id_ != 0) state_->Unwatch(std::exchange(watch_id_, 0));
    if (shutting_down_ || closed_by_guard_) return;
    if (failure_.reason.empty() && !Policy::kTls && outgoing_ && !received_) {
      failure_ = {"the peer closed the connection without a word: it speaks TLS and this node "
                  "plain TCP (every node of a cluster needs --tls_cert, --tls_key and --tls_ca, "
                  "or none does), or it is not a Tessera node",
                  false};
    }
    if (!failure_.reason.empty()) Report(failure_);
  }

 private:
  void Launch() {
    launched_ = true;
    stream_.start(this);
    // A TLS handshake is driven by writes as well as reads (what caf_openssl does).
    if (Policy::kTls) stream_.force_empty_write(this);
    watch_id_ = state_->Watch(this);
  }

  void BecomeAdmitted() {
    guard_.Admit();
    if (watch_id_ != 0) state_->Unwatch(std::exchange(watch_id_, 0));
  }

  // The payload of a BASP handshake starts with the sender's node id.
  void LearnPeer(caf::execution_unit* ctx, const char* bytes, size_t num_bytes) {
    caf::binary_deserializer source(ctx, bytes, num_bytes);
    caf::node_id node;
    if (source(node)) return;  // malformed: BASP will say so and close the connection
    peer_node_ = node;
    if (state_->Admitted(node)) BecomeAdmitted();
  }

  // Note [Allocation follows bytes the guard allowed].
  absl::Status MakeRoom(uint32_t payload_bytes) {
    try {
      stream_.rd_buf().reserve(payload_bytes);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "it announced a message of ", payload_bytes, " bytes, which this node cannot allocate"));
    }
    if (payload_bytes >= kProbeBytes) {
      void* probe = std::malloc(payload_bytes);
      if (probe == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "it announced a message of ", payload_bytes,
            " bytes, which this node cannot allocate twice (CAF copies it to deserialize it)"));
      }
      std::free(probe);
    }
    return absl::OkStatus();
  }

  // Closes the connection for `why` and tells the broker (BASP then forgets the peer's
  // connection, and a connect in progress fails).
  void Close(caf::execution_unit* ctx, ConnectionFailure why) {
    closed_by_guard_ = true;
    Report(why);
    detach(ctx, /*invoke_disconnect_message=*/true);
  }

  void Report(const ConnectionFailure& why) {
    state_->Warn(absl::StrCat("closed the connection ", outgoing_ ? "to " : "from ", peer_, ": ",
                              why.reason));
    if (outgoing_) state_->NoteFailure(peer_, why);
  }

  std::shared_ptr<State> state_;
  const std::string peer_;  // "host:port": dialled, or the accepted peer's address
  const bool outgoing_;
  ConnectionFailure failure_;  // set by a TLS policy on a failed call
  ConnectionGuard guard_;
  caf::node_id peer_node_;  // from the peer's BASP handshake
  uint64_t watch_id_ = 0;   // 0: not watched
  bool launched_ = false;
  bool received_ = false;  // a complete read of the peer's has arrived
  bool shutting_down_ = false;
  bool closed_by_guard_ = false;
  caf::io::network::stream_impl<Policy> stream_;
};

// A connection over `fd` (connected or accepted), plain or TLS as the transport is. Takes the
// socket: closes it on failure.
caf::expected<caf::io::scribe_ptr> MakeConnection(const std::shared_ptr<State>& state,
                                                  native_socket fd, std::string peer,
                                                  bool outgoing) {
  caf::detail::socket_guard socket(fd);
  caf::io::network::nonblocking(fd, true);
  if (!state->tls) {
    caf::io::network::keepalive(fd, true);
    caf::io::scribe_ptr out = caf::make_counted<GuardedScribe<PlainPolicy>>(
        state, fd, std::move(peer), outgoing);
    socket.release();
    return out;
  }
  ERR_clear_error();  // Note [OpenSSL's error queue is per thread]
  caf::openssl::session_ptr session =
      caf::openssl::make_session(state->system, fd, /*from_accepted_socket=*/!outgoing);
  if (session == nullptr) {
    ConnectionFailure failure = DescribeTlsFailure(ERR_peek_error(), /*established=*/false);
    ERR_clear_error();
    if (failure.reason.empty()) failure.reason = "the TLS handshake could not start";
    state->Warn(absl::StrCat("closed the connection ", outgoing ? "to " : "from ", peer, ": ",
                             failure.reason));
    if (outgoing) state->NoteFailure(peer, failure);
    return caf::sec::cannot_connect_to_node;
  }
  caf::io::scribe_ptr out = caf::make_counted<GuardedScribe<TlsPolicy>>(
      state, fd, std::move(peer), outgoing, std::move(session));
  socket.release();
  return out;
}

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
