#include "cluster/network/internal/guarded_connection.h"

#include <caf/binary_deserializer.hpp>
#include <caf/detail/socket_guard.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/openssl/session.hpp>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include <openssl/err.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cluster/network/connection_guard.h"
#include "cluster/network/internal/stream_policies.h"
#include "cluster/network/internal/transport_state.h"

namespace tessera {
namespace transport_internal {

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

namespace {

using State = Transport::State;

// Note above.
constexpr size_t kKeptReadBufferBytes = size_t{64} << 20;
constexpr uint32_t kProbeBytes = uint32_t{16} << 20;

// A guarded connection over one socket, reading and writing through `Policy` (PlainPolicy or
// TlsPolicy, cluster/network/internal/stream_policies.h).
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
      // A TLS node closes a plain hello without a word; so does a node that stops (or is
      // killed) as this one connects, which is the likelier cause once a connection worked.
      failure_ = {
          "the peer closed the connection without a word: it stopped as this node "
          "connected, or it speaks TLS and this node plain TCP (every node of a cluster "
          "needs --tls_cert, --tls_key and --tls_ca, or none does), or it is not a "
          "Tessera node",
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

}  // namespace

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

}  // namespace transport_internal
}  // namespace tessera
