#include "cluster/network/network.h"

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/base/node_gate.h"
#include "cluster/network/port_check.h"
#include "cluster/network/transport.h"
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// How long PublishNode retries a busy port.
constexpr absl::Duration kBindPatience = absl::Seconds(10);

caf::timespan ToTimespan(absl::Duration d) {
  return caf::timespan{absl::ToInt64Nanoseconds(d)};
}

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

// The reason of the first error in OpenSSL's error queue on this thread, clearing the queue.
std::string OpenSslReason() {
  char text[256] = "unknown reason";
  if (const unsigned long code = ERR_peek_error()) {
    ERR_error_string_n(code, text, sizeof(text));
  }
  ERR_clear_error();
  return text;
}

// Note [TLS files are loaded up front]
// CAF's openssl module reads the PEM files only when a connection is made, and when one does
// not load it throws from its I/O thread, which ends the process: a node with a broken
// certificate would publish fine, then die at its first peer. So the files are loaded here, the
// way CAF loads them (caf/openssl/session.cpp), and a bad one is a flag error at start-up.
absl::Status CheckTlsFiles(const NetworkOptions& options) {
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError("cannot create an OpenSSL context");
  // No passphrase prompt on the terminal: CAF is given none, so an encrypted key cannot work.
  SSL_CTX_set_default_passwd_cb(ctx.get(), [](char*, int, int, void*) { return 0; });
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), options.tls_cert.c_str()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_cert ", options.tls_cert,
                                                   " is not a PEM certificate: ",
                                                   OpenSslReason()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), options.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key ", options.tls_key,
        " is not an unencrypted PEM private key of the --tls_cert certificate: ",
        OpenSslReason()));
  }
  if (SSL_CTX_load_verify_locations(ctx.get(), options.tls_ca.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_ca ", options.tls_ca, " is not a PEM CA certificate: ", OpenSslReason()));
  }
  return absl::OkStatus();
}

// Note [A restarted node behind a cached proxy]
// CAF's middleman caches the actor that remote_actor returned for a host:port and drops the entry
// only when that actor's down message reaches the middleman actor. A node that died and was
// started again at its address (a PS after kill -9) can be asked for before that happens: we
// learn of the loss from the down messages of our own monitors (its shards), which may come
// first. The cache then hands back the dead node's gate, whose proxy may even be alive still,
// as the proxies of a lost node are killed one after another. A request to it is dropped without
// an error, so a plain request would wait out its timeout (about one restart in four on a
// 2-core machine). So the hello's asker monitors the gate, and a gate that is or goes down makes
// ConnectToNode ask the middleman again a moment later, when the cache has been purged and a
// new connection reaches the new node.

// The outcome of a hello: the service, a refusal, or nullopt when the gate went down first.
using HelloResult = std::optional<absl::StatusOr<caf::actor>>;

// Says hello through `gate` and returns the service it fronts. The asking actor monitors the
// gate while it waits: a request to a dead node's proxy is dropped without an error (Note [A
// restarted node behind a cached proxy]), and its down message is what says so.
HelloResult Hello(caf::actor_system& system, const Transport& transport, const caf::actor& gate,
                  const NodeAddress& address, const std::string& self_name, int32_t version,
                  const std::string& expected_node) {
  auto answer = std::make_shared<std::promise<HelloResult>>();
  std::future<HelloResult> result = answer->get_future();
  auto judge = [=](int32_t peer_version, const std::string& node,
                   caf::actor service) -> absl::StatusOr<caf::actor> {
    if (peer_version != version) {
      return absl::FailedPreconditionError(
          absl::StrCat(address.ToString(), " speaks Tessera protocol version ", peer_version,
                       " but ", self_name, " speaks version ", version));
    }
    if (!expected_node.empty() && node != expected_node) {
      return absl::FailedPreconditionError(
          absl::StrCat(address.ToString(), " is ", node, ", not ", expected_node,
                       ": check the cluster spec (and --task of each tessera ps)"));
    }
    transport.Admit(gate.node());  // its messages may now be as large as any peer's
    return service;
  };
  // Every path answers exactly once and quits, so no second answer can follow. (The gate is
  // passed as an argument: CAF 0.17 dereferences a null argument tuple when there is none.)
  system.spawn([=](caf::event_based_actor* self, const caf::actor& asked) {
    self->monitor(asked);
    self->set_down_handler([=](caf::down_msg&) {
      answer->set_value(std::nullopt);
      self->quit();
    });
    self->request(asked, std::chrono::seconds(10), hello_atom::value, version, self_name)
        .then(
            [=](int32_t peer_version, std::string& node, caf::actor service) {
              answer->set_value(judge(peer_version, node, std::move(service)));
              self->quit();
            },
            [=](caf::error& err) {
              if (err == caf::sec::request_receiver_down) {
                answer->set_value(std::nullopt);
              } else if (err.category() == kErrorCategory) {
                answer->set_value(ErrorToStatus(err));
              } else {
                answer->set_value(absl::UnavailableError(absl::StrCat(
                    "handshake with ", address.ToString(),
                    " failed: ", self->system().render(err))));
              }
              self->quit();
            });
  }, gate);
  return result.get();
}

}  // namespace

absl::Status ValidateNetworkOptions(const NetworkOptions& options) {
  const int given = !options.tls_cert.empty() + !options.tls_key.empty() +
                    !options.tls_ca.empty();
  if (given != 0 && given != 3) {
    return absl::InvalidArgumentError(
        "TLS needs all of --tls_cert, --tls_key and --tls_ca (or none of them)");
  }
  for (const std::string& file : {options.tls_cert, options.tls_key, options.tls_ca}) {
    if (!file.empty() && !Readable(file)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS file ", file));
    }
  }
  // Note [TLS files are loaded up front].
  if (options.tls()) TESSERA_RETURN_IF_ERROR(CheckTlsFiles(options));
  if (options.connect_timeout <= absl::ZeroDuration() ||
      options.heartbeat_interval <= absl::ZeroDuration() ||
      options.connection_timeout <= options.heartbeat_interval ||
      options.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "network timeouts must be positive, with the heartbeat shorter than the connection "
        "timeout");
  }
  if (options.max_message_bytes < kMinMaxMessageBytes ||
      options.max_message_bytes > kMaxMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes=", options.max_message_bytes, " is outside ", kMinMaxMessageBytes,
        "..", kMaxMaxMessageBytes, " (1 MiB .. 4 GiB - 1: BASP's length field)"));
  }
  if (options.max_handshake_bytes < 1024 ||
      options.max_handshake_bytes > options.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the handshake message limit ", options.max_handshake_bytes,
        " must be in 1024..--max_message_bytes"));
  }
  return absl::OkStatus();
}

absl::Status ConfigureNetwork(caf::actor_system_config& cfg, const NetworkOptions& options) {
  TESSERA_RETURN_IF_ERROR(ValidateNetworkOptions(options));
  cfg.load<caf::io::middleman>();
  if (options.tls()) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = options.tls_cert;
    cfg.openssl_key = options.tls_key;
    cfg.openssl_cafile = options.tls_ca;
  }
  cfg.set("middleman.heartbeat-interval", ToTimespan(options.heartbeat_interval));
  cfg.set("middleman.connection-timeout", ToTimespan(options.connection_timeout));
  // Note [Scheduler on a networked node]: unlike the simulation (Note [Scheduler policy] in
  // cluster.cc), a networked node does better with work stealing. Its work arrives from the
  // middleman's thread as external enqueues, which wake a thread blocked on its condition
  // variable at once; the sharing policy's single queue costs a remote round trip more
  // (bench/net_ops, quiet host: 1 KiB gather 123 us vs 177 us; worst ratio at >= 256 KiB with 4
  // in flight 0.64x vs 0.47x). Idle threads skip the moderate sleep-polling phase (20 us sleeps,
  // ~70 us with timer slack, which such enqueues do not cut short) and block; sends between
  // actors inside the node are found by the relaxed phase's steal every 1 ms.
  cfg.set("scheduler.policy", caf::atom("stealing"));
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  cfg.set("work-stealing.relaxed-steal-interval", size_t{1});
  cfg.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> PublishNode(caf::actor_system& system, const std::string& node,
                                     caf::actor service, uint16_t port,
                                     const NetworkOptions& options,
                                     absl::string_view how_to_change_port, int32_t version) {
  Transport transport = Transport::Of(system, options);
  caf::actor gate = SpawnNodeGate(system, node, std::move(service), version,
                                  [transport](const caf::node_id& peer) { transport.Admit(peer); });
  const std::string how = how_to_change_port.empty()
                              ? std::string("choose another port")
                              : std::string(how_to_change_port);
  // Note [A busy port]: a port another process listens on is an error at once, naming the port,
  // this node and how to choose another (cluster/network/port_check.h): no wait can free it. A node
  // started again at its address (a restarted PS or coordinator) can instead find its port held
  // a moment by the connections of the process it replaces, or by a connection that took it as
  // its local port meanwhile (a peer reconnecting to this very address): that frees itself, so
  // such a port is retried for kBindPatience, saying so once.
  const absl::Time deadline = absl::Now() + kBindPatience;
  caf::expected<uint16_t> bound = caf::sec::cannot_open_port;
  absl::Status listenable;
  for (bool said = false;; said = true) {
    bound = transport.Publish(gate, port, options.bind);
    if (bound || port == 0) break;
    listenable = CheckCanListen(node, options.bind, port, how);
    if (!listenable.ok() || absl::Now() >= deadline) break;
    if (!said) {
      Log().info("{}: port {} is held by connections, not a listener; waiting up to {} for them "
                 "to close",
                 node, port, absl::FormatDuration(kBindPatience));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!bound) {
    caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
    if (!listenable.ok()) return listenable;
    return absl::UnavailableError(absl::StrCat(
        node, " cannot listen on ", options.bind, ":", port, ": ", system.render(bound.error()),
        port == 0 ? "" : absl::StrCat(" (the port stayed in use for ",
                                      absl::FormatDuration(kBindPatience), "); ", how)));
  }
  return *bound;
}

absl::StatusOr<caf::actor> ConnectToNode(caf::actor_system& system, const NodeAddress& address,
                                         const std::string& self_name,
                                         const NetworkOptions& options, int32_t version,
                                         const std::string& expected_node) {
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  Transport transport = Transport::Of(system, options);
  transport.TakeFailure(address);  // a note of an earlier connection says nothing about this one
  // Nobody listening yet (a node still starting), a handshake not finished within the
  // middleman's connection timeout (a node busy starting on a loaded machine) and a cached gate
  // of a node that has died (Note [A restarted node behind a cached proxy]) are worth waiting
  // for; a connection that is accepted and then dropped in the handshake (a non-Tessera peer)
  // is tried a few times only, and one the transport knows cannot work (TLS against plain TCP,
  // a refused certificate) not again, so a configuration problem shows at once rather than
  // after the timeout.
  for (int dropped = 0;; std::this_thread::sleep_for(std::chrono::milliseconds(100))) {
    caf::expected<caf::actor> gate = transport.Connect(address);
    if (gate) {
      HelloResult service =
          Hello(system, transport, *gate, address, self_name, version, expected_node);
      if (service.has_value()) return *std::move(service);
      gate = caf::sec::cannot_connect_to_node;  // a dead node's gate: ask again
    }
    const caf::error& why = gate.error();
    const std::optional<ConnectionFailure> failure = transport.TakeFailure(address);
    if (failure.has_value() && failure->misconfigured) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot connect to ", address.ToString(), ": ", failure->reason));
    }
    const bool waiting = !failure.has_value() && (why == caf::sec::cannot_connect_to_node ||
                                                  why == caf::sec::connection_timeout);
    if (!waiting && ++dropped >= 3) {
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to ", address.ToString(), ": the handshake failed ", dropped,
          " times: ", failure.has_value() ? failure->reason : system.render(why)));
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("cannot reach ", address.ToString(), " within ",
                                                 absl::FormatDuration(options.connect_timeout),
                                                 ": ", system.render(why)));
    }
  }
}

}  // namespace tessera
