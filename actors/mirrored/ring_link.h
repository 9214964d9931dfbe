// Ring links: a one-way TCP stream of ring messages from one replica to the next when the two are
// in different processes, beside the actor connection (BASP) that carries everything else.
//
// Over BASP a ring message is serialized into the middleman's buffer, copied again on the way in
// and deserialized, all on each process's one middleman thread. Over a link the sender writes the
// segment straight from its buffer (writev: header and values, no copy in user space) and a reader
// thread of the receiver reads it into memory of its own, which becomes the message's values (Note
// [Ring segments read in place], core/mirrored/collective.h): two copies instead of four, and none
// on the middleman.
//
// Set-up (Note [Ring links], actors/mirrored/replica_ring_links.cc): the receiver listens on a
// fresh port and hands the port and a random token to its previous replica over the actor
// connection (a peer that has passed the cluster's handshake); the sender connects and presents the
// token, so nobody who did not ask over that connection can feed the receiver. A connection that
// does not present it within kHelloTimeout is closed and the listener waits for the next, until the
// accept timeout. With TLS the replicas use no links: the stream would be plain TCP, and the ring
// stays on BASP.
//
// Wire format (both ends are the same build on the same architecture: the actor handshake has
// checked the protocol version): a hello of the 8 bytes kRingLinkMagic and the 32-character
// token, then messages of a RingLinkHeader and `elements` floats, in host byte order. Anything
// else (a bad magic, a negative or oversized count, a truncated message) ends the link with
// DataLoss; nothing of a bad message reaches the replica.
//
// Thread-safety: a RingLinkSender is used by one thread at a time. A RingLinkReceiver calls its
// handlers on its own reader thread; destroying it stops and joins that thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mirrored/collective.h"

namespace tessera {

inline constexpr char kRingLinkMagic[8] = {'t', 's', 'r', 'a', 'l', 'n', 'k', '1'};
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(5);
// How long a send may wait for a receiver that takes nothing (a process stopped, a machine gone
// from the network) before the link counts as broken: the sending replica must stay free to hear
// the driver's abort and a new ring.
inline constexpr absl::Duration kSendTimeout = absl::Seconds(10);

// One ring message's header on a link.
struct RingLinkHeader {
  int64_t collective = 0;
  int64_t chunk = 0;
  int64_t elements = 0;
  int32_t step = 0;
  uint32_t magic = 0;  // kRingLinkHeaderMagic
};
inline constexpr uint32_t kRingLinkHeaderMagic = 0x6b6e6c72;  // "rlnk"

class RingLinkSender {
 public:
  // Connects to a receiver at host:port (within `timeout`) and presents `token`; a later send
  // the receiver takes nothing of for `send_timeout` breaks the link.
  static absl::StatusOr<std::unique_ptr<RingLinkSender>> Connect(
      const std::string& host, uint16_t port, const std::string& token, absl::Duration timeout,
      absl::Duration send_timeout = kSendTimeout);
  ~RingLinkSender();
  RingLinkSender(const RingLinkSender&) = delete;
  RingLinkSender& operator=(const RingLinkSender&) = delete;

  // Writes one message, blocking until the kernel has all of it. Unavailable when the link is
  // broken (the receiver closed it or died, or took nothing for the send timeout); the link is
  // then unusable.
  absl::Status Send(int64_t collective, const RingChunk& chunk);

 private:
  RingLinkSender(int fd, absl::Duration send_timeout) : fd_(fd), send_timeout_(send_timeout) {}
  int fd_ = -1;
  absl::Duration send_timeout_;
};

class RingLinkReceiver {
 public:
  using ChunkHandler = std::function<void(int64_t collective, RingChunk chunk)>;
  // The link's end, once: OK when the sender closed it after whole messages (or the receiver was
  // destroyed); DeadlineExceeded when no sender presented the token in time; DataLoss for a
  // malformed or truncated message; Unavailable for a socket error.
  using EndHandler = std::function<void(absl::Status why)>;

  // Listens on `bind`, on a port the system picks, for one sender presenting token(); then reads
  // its messages, each of at most `max_elements` floats, on a thread of its own, handing each to
  // `on_chunk` and the end to `on_end`.
  static absl::StatusOr<std::unique_ptr<RingLinkReceiver>> Listen(const std::string& bind,
                                                                  int64_t max_elements,
                                                                  absl::Duration accept_timeout,
                                                                  ChunkHandler on_chunk,
                                                                  EndHandler on_end);
  ~RingLinkReceiver();
  RingLinkReceiver(const RingLinkReceiver&) = delete;
  RingLinkReceiver& operator=(const RingLinkReceiver&) = delete;

  uint16_t port() const { return port_; }
  const std::string& token() const { return token_; }

 private:
  RingLinkReceiver() = default;
  void Run(absl::Duration accept_timeout);
  absl::Status Accept(absl::Duration timeout);
  absl::Status ReadMessages();

  int listen_fd_ = -1;
  std::atomic<int> fd_{-1};
  uint16_t port_ = 0;
  std::string token_;
  int64_t max_elements_ = 0;
  ChunkHandler on_chunk_;
  EndHandler on_end_;
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

}  // namespace tessera
