// The cluster a strategy places variables on (Cluster), who is where in a networked cluster, and
// which of them this process is. The last two come from one JSON shape, read from a cluster spec
// file (--cluster_spec) or from TensorFlow's TF_CONFIG environment variable:
//   {"cluster": {"chief": ["10.0.0.5:7000"],
//                "ps": ["10.0.0.1:7001", "10.0.0.2:7001"],
//                "worker": ["10.0.0.3:7101", "10.0.0.4:7101"],
//                "ps_standby": ["10.0.0.6:7001"]},
//    "task": {"type": "worker", "index": 1}}
// Worker addresses name the worker tasks (their count is the number of worker slots); only the
// PS and coordinator addresses are listened on. The optional "ps_standby" list names
// `tessera ps --standby` processes: a lost PS is replaced by the first one not used yet.
//
// Note [TF_CONFIG's task types]
// TF's ParameterServerStrategy calls its coordinator "chief" (TFConfigClusterResolver's task
// types are "chief", "worker", "ps" and "evaluator"), so TF_CONFIG manifests map onto Tessera's
// processes as:
//   "chief" or "coordinator"  the coordinator: the training program in its default role (index 0)
//   "worker"                  worker task K: the training program, as --role=worker --task=K
//   "ps"                      PS task K: `tessera ps --task K`
//   "ps_standby"              (Tessera's own) standby K: `tessera ps --standby`
//   "evaluator"               no process: Tessera's workers evaluate (--eval_every); its
//                             addresses are ignored and a process whose task it is is refused
// "index" defaults to 0, as in TF; other top-level keys (TF's "rpc_layer", "environment") are
// ignored.
//
// Where a process finds its cluster and task, most specific first (ResolveClusterConfig): its
// flags (each binary's own: --role, --task, --port, --standby), then the --cluster_spec file,
// then TF_CONFIG. A task's address says where the task is; which interface a node listens on
// is still --host / --bind (loopback by default).
//
// How a node talks to the others (NetworkOptions: TLS, the listening address, timeouts and the
// bounds on what a peer can make it allocate) is next, and the Cluster at the end.
//
// Thread-safety: pure functions, except TfConfigFromEnvironment, which reads the environment; a
// Cluster's Start/Connect and destructor on one thread, its accessors from any.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tessera {

struct NodeAddress {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;
};

// "host:port" (port 1..65535). InvalidArgument otherwise.
absl::StatusOr<NodeAddress> ParseNodeAddress(absl::string_view text);

struct ClusterSpec {
  std::vector<NodeAddress> ps;          // PS task k listens at ps[k]
  std::vector<NodeAddress> workers;     // one per worker task
  NodeAddress coordinator;              // where workers find the coordinator
  std::vector<NodeAddress> ps_standby;  // `tessera ps --standby` nodes that can replace a lost PS
  // Where it was read, for messages: "the cluster spec /etc/cluster.json" or "TF_CONFIG".
  std::string source = "the cluster spec";
};

// Which process of a cluster one is (Note [TF_CONFIG's task types]).
enum class TaskType { kCoordinator, kWorker, kPs, kPsStandby };

struct ClusterTask {
  TaskType type = TaskType::kCoordinator;
  int32_t index = 0;
  // As TF_CONFIG writes it: {"type": "worker", "index": 1} ("chief" for the coordinator).
  std::string ToString() const;
};

// A cluster spec document: its cluster, its task, and where it was read.
struct ClusterConfig {
  std::optional<ClusterSpec> cluster;  // none: a document without "cluster" (TF_CONFIG may hold
                                       // only a task), or no document at all
  std::optional<ClusterTask> task;     // the document's "task"
  std::string task_source;             // where `task` was read ("TF_CONFIG", a spec's path)
};

// Parses a document of the shape above. `source` ("TF_CONFIG", "the cluster spec F") starts
// every error. Without `require_cluster`, a document without "cluster", or with an empty one, has
// none. InvalidArgument for malformed JSON; a "cluster" that is not an object, or (with
// `require_cluster`) none; a missing or empty "ps" or "worker" list; not exactly one
// "coordinator" or "chief" address; a bad address; a "task" without a known "type" (an
// "evaluator" task is refused, naming why) or with an "index" that is not an integer >= 0; a
// task whose index is past its list in the cluster.
absl::StatusOr<ClusterConfig> ParseClusterConfig(absl::string_view json, absl::string_view source,
                                                 bool require_cluster = true);

// $TF_CONFIG; nullopt when it is unset or blank.
std::optional<std::string> TfConfigFromEnvironment();

// Where a process may find its cluster and task.
struct ClusterSources {
  std::string spec_path;                 // --cluster_spec ("": none)
  std::optional<std::string> tf_config;  // TF_CONFIG's value (TfConfigFromEnvironment)
};

// The cluster of the spec file when there is one, else TF_CONFIG's (none without either); the
// task of the spec file when it has one, else TF_CONFIG's. Errors as ParseClusterConfig, naming
// "the cluster spec <path>" or TF_CONFIG; NotFound when the file cannot be read; InvalidArgument
// for a task without any cluster, or one past its list in the cluster it is resolved against.
absl::StatusOr<ClusterConfig> ResolveClusterConfig(const ClusterSources& sources);

// How the user gives the coordinator another port, for the error when its own is taken: "change
// the coordinator's ("chief") address 127.0.0.1:7000 in TF_CONFIG".
std::string CoordinatorPortAdvice(const ClusterSpec& cluster);

// OK when `task` exists in `cluster`; InvalidArgument naming it, `source` and the list's length.
absl::Status CheckTaskInCluster(const ClusterTask& task, const ClusterSpec& cluster,
                                absl::string_view source);

// -- The network --------------------------------------------------------------------------------

// --max_message_bytes's default (1 GiB) and bounds: BASP's length field has 32 bits, and a
// node must take at least a 1 MiB message.
inline constexpr uint64_t kDefaultMaxMessageBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMinMaxMessageBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxMaxMessageBytes = (uint64_t{1} << 32) - 1;

struct NetworkOptions {
  // Mutual TLS: all three PEM files, or none.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool tls() const { return !tls_cert.empty(); }
  // The address this node listens on: loopback unless told otherwise ("0.0.0.0": every interface).
  std::string bind = "127.0.0.1";
  // How long to keep trying to reach a node that is not up yet.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Heartbeats on every connection; a connection silent for `connection_timeout` is closed and
  // its actors reported down (a process killed outright is noticed at once: its socket closes).
  absl::Duration heartbeat_interval = absl::Milliseconds(250);
  absl::Duration connection_timeout = absl::Seconds(2);
  // What a peer may make this node allocate (cluster/network/transport.h): one message of at most
  // `max_message_bytes` once it has completed the version handshake (--max_message_bytes;
  // the largest message of a run is a whole shard read or assigned at once, and a batch's
  // gathered rows or gradients for one PS node), at most `max_handshake_bytes` before. A
  // connection whose peer has not completed the handshake within `handshake_timeout` is closed.
  uint64_t max_message_bytes = kDefaultMaxMessageBytes;
  uint64_t max_handshake_bytes = 64 << 10;
  absl::Duration handshake_timeout = absl::Seconds(10);
};

// -- The cluster ----------------------------------------------------------------------------------

struct ClusterOptions {
  int32_t num_ps = 1;       // >= 1
  int32_t num_workers = 1;  // >= 1: worker slots (the coordinator starts them)
  int32_t threads = 0;      // scheduler threads; 0: one per core (not CAF's max(cores, 4))
};

class ClusterActors;  // internal: what stands behind a Cluster (cluster/base/cluster.h)

// The parameter-server nodes a strategy places variables on, and the worker slots a
// ClusterCoordinator fills (TF's cluster resolver and the cluster it names) — either
//   - in process (StartInProcess): the single-process simulation, the PS nodes and (once a
//     coordinator starts them) the workers all in this process; or
//   - networked (Connect): this process is the coordinator of a cluster spec's PS processes
//     (`tessera ps`) and worker processes (a training program with --role=worker), which join
//     it over the network.
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster,
//                            Cluster::StartInProcess({.num_ps = 2, .num_workers = 2}));
//   ParameterServerStrategy strategy(*cluster, *FixedShardsPartitioner(4));
//
// The destructor stops the in-process PS nodes (their shards follow; PS processes keep running);
// a ClusterCoordinator and the strategies on the cluster must be destroyed first.
class Cluster {
 public:
  // InvalidArgument when num_ps or num_workers is < 1 or threads < 0.
  static absl::StatusOr<std::unique_ptr<Cluster>> StartInProcess(const ClusterOptions& options);
  // The coordinator of a networked cluster: connects to every PS of `spec` (waiting up to
  // network.connect_timeout for each; one that cannot be reached is replaced by a standby of the
  // spec); one worker slot per worker of the spec. Names this process's log role
  // "coordinator". Unavailable or DeadlineExceeded for a PS that cannot be reached,
  // InvalidArgument for bad network options (TLS files that cannot be read, ...).
  static absl::StatusOr<std::unique_ptr<Cluster>> Connect(const ClusterSpec& spec,
                                                          const NetworkOptions& network,
                                                          int32_t threads = 0);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  const ClusterOptions& options() const;
  int32_t num_ps() const { return options().num_ps; }
  int32_t num_workers() const { return options().num_workers; }
  // Networked mode: the spec and options it was connected with (nullopt in process).
  bool networked() const;
  const std::optional<ClusterSpec>& spec() const;
  const NetworkOptions& network() const;
  // Networked mode: where each PS task is now (its spec address, or the standby that replaced
  // it), as "host:port".
  std::vector<std::string> ps_addresses() const;

  // Internal, for the library: the actor system, the PS nodes and the session.
  ClusterActors& actors() const { return *actors_; }

 private:
  explicit Cluster(std::unique_ptr<ClusterActors> actors);
  std::unique_ptr<ClusterActors> actors_;
};

}  // namespace tessera
