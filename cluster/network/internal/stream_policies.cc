#include "cluster/network/internal/stream_policies.h"

#include <string>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace transport_internal {
namespace {

std::string OpenSslReasonText(unsigned long code) {
  char text[256] = "unknown reason";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  return text;
}

}  // namespace

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

}  // namespace transport_internal
}  // namespace tessera
