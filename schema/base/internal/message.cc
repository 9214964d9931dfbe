#include "schema/base/internal/message.h"

#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace schema_internal {
namespace {

// Cap'n Proto's own cap on one segment is 2^29 words; a first segment of up to 2^28 words
// (2 GiB) holds the largest tensors the readers accept in one piece or a few.
constexpr size_t kMaxFirstSegmentWords = size_t{1} << 28;

capnp::ReaderOptions LimitsFor(size_t body_bytes) {
  capnp::ReaderOptions options;
  // A well-formed message is read once, so it traverses about as many words as it has; twice
  // that plus slack leaves room for the decoders' own re-reads and still stops a forged message
  // whose pointers all alias one big object (Cap'n Proto's amplification attack).
  const uint64_t words = body_bytes / sizeof(capnp::word);
  options.traversalLimitInWords = std::min<uint64_t>(2 * words + 1024, uint64_t{1} << 40);
  options.nestingLimit = 64;
  return options;
}

}  // namespace

absl::StatusOr<std::string> SerializeAfterHeaderSpace(FileKind kind,
                                                      capnp::MessageBuilder& message) {
  try {
    const size_t words = capnp::computeSerializedSizeInWords(message);
    std::string bytes(kEnvelopeHeaderBytes + words * sizeof(capnp::word), '\0');
    kj::ArrayOutputStream out(
        kj::arrayPtr(reinterpret_cast<kj::byte*>(bytes.data() + kEnvelopeHeaderBytes),
                     words * sizeof(capnp::word)));
    capnp::writeMessage(out, message);
    return bytes;
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the ", FileKindName(kind), ": ", e.getDescription().cStr()));
  }
}

absl::StatusOr<std::string> BuildSealedMessage(
    FileKind kind, size_t estimated_bytes, absl::FunctionRef<void(capnp::MessageBuilder&)> build) {
  try {
    const size_t first_words =
        std::clamp<size_t>(estimated_bytes / sizeof(capnp::word) + 64, 1024, kMaxFirstSegmentWords);
    capnp::MallocMessageBuilder message(static_cast<unsigned>(first_words));
    build(message);
    absl::StatusOr<std::string> bytes = SerializeAfterHeaderSpace(kind, message);
    if (bytes.ok()) SealInPlace(kind, *bytes);
    return bytes;
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the ", FileKindName(kind), ": ", e.getDescription().cStr()));
  }
}

absl::Status ReadSealedMessage(FileKind kind, absl::string_view bytes,
                               absl::FunctionRef<absl::Status(capnp::MessageReader&)> read) {
  absl::StatusOr<Envelope> envelope = OpenEnvelope(kind, bytes);
  if (!envelope.ok()) return envelope.status();
  if (!envelope->tail.empty()) {
    return absl::DataLossError(absl::StrCat(FileKindName(kind), ": unexpected data after its message"));
  }
  return ReadMessage(kind, envelope->message, read);
}

absl::Status ReadMessage(FileKind kind, absl::string_view message,
                         absl::FunctionRef<absl::Status(capnp::MessageReader&)> read) {
  // The parser reads words in place, so they must be word-aligned; a std::string's heap buffer
  // is, and the header is a whole number of words. Copy in the rare other case.
  kj::Array<capnp::word> aligned;
  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(message.data()),
                                        message.size() / sizeof(capnp::word));
  if (reinterpret_cast<uintptr_t>(message.data()) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(words.size());
    std::memcpy(aligned.begin(), message.data(), words.size() * sizeof(capnp::word));
    words = aligned.asPtr();
  }
  try {
    capnp::FlatArrayMessageReader reader(words, LimitsFor(message.size()));
    if (reader.getEnd() != words.end()) {
      return absl::DataLossError(absl::StrCat(FileKindName(kind), ": ",
                                              words.end() - reader.getEnd(),
                                              " words after the end of its message"));
    }
    return read(reader);
  } catch (const kj::Exception& e) {
    return absl::DataLossError(
        absl::StrCat(FileKindName(kind), ": malformed content: ", e.getDescription().cStr()));
  }
}

}  // namespace schema_internal
}  // namespace tessera
