// scale: the recsys model at the RFC's own size (user embedding 600000 x 1000, item embedding
// 60000 x 1000, hidden 64, Adagrad: 2.64 GB of parameters and 2.64 GB of slots), trained by real
// processes, with the figures docs/design.md §5 holds the system to:
//   - the simulation (one `recsys` process, 2 PS + 2 workers): seconds from process start to
//     the first training step, peak RSS against parameters + slots, training examples/s of the
//     first pass over the examples and of the second (--passes): the first initializes each
//     row as a step first touches it (Note [Rows initialized on first touch]), work PyTorch
//     does before its clock starts, so the second compares the steps alone;
//   - checkpoint save and restore of that state, against plain sequential file I/O of the same
//     bytes in the same directory (fsync'd, as checkpoints are);
//   - networked (2 `tessera ps`, 2 worker processes, the coordinator): each process's peak RSS,
//     the workers' and the coordinator's against parameters + slots;
//   - PyTorch single-process on the same model and examples (bench/torch_recsys.py), when
//     Debian's python3-torch is installed: its build time, peak RSS and examples/s beside ours.
// Peak RSS is each child's ru_maxrss (wait4). The last line is one JSON object.
//
//   build/bench/scale                                   # the RFC size (needs ~14 GB of RAM free)
//   build/bench/scale --users=100000 --items=10000 --embedding_dim=256   # a quick look
//   build/bench/scale --torch=off --networked=false
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/scratch_dir.h"
#include "tessera/status.h"
#include "tessera/workloads/recsys_data.h"

ABSL_FLAG(int64_t, users, 600000, "rows of the user embedding");
ABSL_FLAG(int64_t, items, 60000, "rows of the item embedding");
ABSL_FLAG(int64_t, embedding_dim, 1000, "embedding dimension");
ABSL_FLAG(int64_t, hidden, 64, "hidden units");
ABSL_FLAG(int64_t, train_examples, 200000, "training examples");
ABSL_FLAG(int64_t, passes, 2,
          "passes over the training examples in the simulation and PyTorch: the first pass's "
          "examples/s is the figure; a later one's compares them with every row initialized");
ABSL_FLAG(int64_t, test_examples, 20000, "test examples");
ABSL_FLAG(int64_t, batch_size, 512, "examples per step");
ABSL_FLAG(std::string, partitioner, "fixed:4", "how the embeddings are sharded");
ABSL_FLAG(bool, checkpoint, true, "measure checkpoint save and restore");
ABSL_FLAG(bool, networked, true, "measure the networked run's per-process memory");
ABSL_FLAG(std::string, torch, "auto", "run the PyTorch comparison: auto (when importable), on, off");
ABSL_FLAG(std::string, work_dir, "",
          "scratch directory, kept (default: a fresh one under /tmp, removed at the end)");
ABSL_FLAG(std::string, recsys, "", "the recsys driver (default: next to this program's build)");
ABSL_FLAG(std::string, tessera, "", "the tessera binary (default: next to this program's build)");

namespace tessera {
namespace {

namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string BuildDir() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path().string();
}

// A child process: its pid and where its output goes.
struct Child {
  pid_t pid = -1;
  std::string log;
};

absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return Child{pid, log};
}

struct Exit {
  int status = 0;
  int64_t peak_rss_bytes = 0;
  double seconds = 0;
};

// Waits for `child`; an error naming its log's last lines unless it exited 0.
absl::StatusOr<Exit> Wait(const Child& child, double started) {
  int status = 0;
  rusage usage{};
  if (wait4(child.pid, &status, 0, &usage) != child.pid) {
    return absl::InternalError(absl::StrCat("wait4 ", child.pid, " failed"));
  }
  Exit exit{status, static_cast<int64_t>(usage.ru_maxrss) * 1024, Now() - started};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd = absl::StrCat("tail -n 5 ", child.log, " >&2");
    std::fprintf(stderr, "scale: %s failed (status %d); its log ends:\n", child.log.c_str(),
                 status);
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "(no log)\n");
    return absl::InternalError(absl::StrCat(child.log, ": exit status ", status));
  }
  return exit;
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no ", path));
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

int64_t DirectoryBytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) total += static_cast<int64_t>(entry.file_size());
  }
  return total;
}

struct SequentialSeconds {
  double write = 0;       // 8 MiB writes, then fsync
  double read = 0;        // 8 MiB reads into one reused buffer (page cache -> a hot buffer)
  double read_fresh = 0;  // one read of the whole file into memory just allocated (page cache ->
                          // fresh pages, faulted in as they fill: where a restore's bytes go)
};

// Seconds to write `bytes` sequentially and fsync, then to read them back both ways.
absl::StatusOr<SequentialSeconds> SequentialIo(const std::string& path, int64_t bytes) {
  std::vector<char> block(size_t{8} << 20, 'x');
  double start = Now();
  const int out = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0) return absl::InternalError(absl::StrCat("cannot create ", path));
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = write(out, block.data(), std::min<int64_t>(block.size(), bytes - done));
    if (n <= 0) return absl::InternalError(absl::StrCat("writing ", path));
    done += n;
  }
  fsync(out);
  close(out);
  const double write_seconds = Now() - start;
  start = Now();
  const int in = open(path.c_str(), O_RDONLY);
  while (read(in, block.data(), block.size()) > 0) {
  }
  close(in);
  const double read_seconds = Now() - start;
  start = Now();
  {
    std::unique_ptr<char[]> whole(new char[static_cast<size_t>(bytes)]);
    const int again = open(path.c_str(), O_RDONLY);
    for (int64_t done = 0; done < bytes;) {
      const ssize_t n = read(again, whole.get() + done, static_cast<size_t>(bytes - done));
      if (n <= 0) break;
      done += n;
    }
    close(again);
  }
  const double fresh_seconds = Now() - start;
  fs::remove(path);
  return SequentialSeconds{write_seconds, read_seconds, fresh_seconds};
}

// The examples of both splits as the PyTorch script reads them (bench/torch_recsys.py).
absl::Status WriteExamples(const RecsysData& data, const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const Batch train, data.train.Slice(0, data.train.size()));
  TESSERA_ASSIGN_OR_RETURN(const Batch test, data.test.Slice(0, data.test.size()));
  std::ofstream out(path, std::ios::binary);
  const int64_t counts[2] = {train.size, test.size};
  out.write(reinterpret_cast<const char*>(counts), sizeof(counts));
  for (const Batch* b : {&train, &test}) {
    for (const char* feature : {kRecsysUserFeature, kRecsysItemFeature}) {
      const Ids& ids = b->ids.at(feature);
      out.write(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int64_t));
    }
    out.write(reinterpret_cast<const char*>(b->labels.data()), b->labels.size() * sizeof(float));
  }
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string Gib(int64_t bytes) { return absl::StrFormat("%.2f GiB", bytes / 1073741824.0); }
std::string Mib(int64_t bytes) { return absl::StrFormat("%.0f MiB", bytes / 1048576.0); }
// Each pass's figure, "105724 / 154047" (precision 0) or "1.94x / 2.39x" (2, "x").
std::string PerPass(const std::vector<double>& passes, int precision, const char* unit = "") {
  return absl::StrJoin(passes, " / ", [precision, unit](std::string* o, double x) {
    absl::StrAppendFormat(o, "%.*f%s", precision, x, unit);
  });
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  const int64_t users = absl::GetFlag(FLAGS_users), items = absl::GetFlag(FLAGS_items);
  const int64_t dim = absl::GetFlag(FLAGS_embedding_dim);
  const int64_t parameter_bytes =
      4 * ((users + items) * dim + (2 * dim + 1) * absl::GetFlag(FLAGS_hidden) +
           absl::GetFlag(FLAGS_hidden) + 1);
  const int64_t state_bytes = 2 * parameter_bytes;  // Adagrad: one accumulator per value
  const std::string build = BuildDir();
  std::string recsys = absl::GetFlag(FLAGS_recsys), tessera = absl::GetFlag(FLAGS_tessera);
  if (recsys.empty()) recsys = build + "/examples/recsys";
  if (tessera.empty()) tessera = build + "/cli/tessera";
  const bench::ScratchDir scratch(absl::GetFlag(FLAGS_work_dir), "tessera-scale");
  const std::string& work = scratch.path();
  std::printf("scale: U=%lld I=%lld D=%lld: parameters %s, parameters + slots %s; work in %s\n",
              static_cast<long long>(users), static_cast<long long>(items),
              static_cast<long long>(dim), Gib(parameter_bytes).c_str(), Gib(state_bytes).c_str(),
              work.c_str());
  const std::vector<std::string> model = {
      absl::StrCat("--users=", users),
      absl::StrCat("--items=", items),
      absl::StrCat("--embedding_dim=", dim),
      absl::StrCat("--hidden=", absl::GetFlag(FLAGS_hidden)),
      absl::StrCat("--train_examples=", absl::GetFlag(FLAGS_train_examples)),
      absl::StrCat("--test_examples=", absl::GetFlag(FLAGS_test_examples)),
      absl::StrCat("--batch_size=", absl::GetFlag(FLAGS_batch_size)),
      absl::StrCat("--partitioner=", absl::GetFlag(FLAGS_partitioner))};
  auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  nlohmann::json out = {{"users", users},
                        {"items", items},
                        {"embedding_dim", dim},
                        {"parameter_bytes", parameter_bytes},
                        {"parameters_and_slots_bytes", state_bytes}};

  // 1. The simulation, with a final checkpoint.
  const std::string ckpt = work + "/ckpt";
  fs::remove_all(ckpt);
  const int64_t passes = absl::GetFlag(FLAGS_passes);
  if (passes < 1) return absl::InvalidArgumentError("--passes must be >= 1");
  const std::string epochs = absl::StrCat("--epochs=", passes);
  std::vector<std::string> sim = with({recsys, epochs}, model);
  sim.push_back(absl::StrCat("--summary=", work, "/sim.json"));
  if (absl::GetFlag(FLAGS_checkpoint)) sim.push_back("--checkpoint_dir=" + ckpt);
  double started = Now();
  TESSERA_ASSIGN_OR_RETURN(Child child, Spawn(sim, work + "/sim.log"));
  TESSERA_ASSIGN_OR_RETURN(const Exit sim_exit, Wait(child, started));
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json sim_summary, ReadJson(work + "/sim.json"));
  const double startup = sim_summary.value("startup_seconds", 0.0);
  const std::vector<double> sim_passes =
      sim_summary.value("examples_per_sec_by_pass", std::vector<double>{});
  if (sim_passes.size() != static_cast<size_t>(passes)) {
    return absl::InternalError(
        absl::StrCat("sim.json: ", sim_passes.size(), " passes, not ", passes));
  }
  const double sim_eps = sim_passes[0];
  std::printf(
      "sim: first step %.2f s after start; %s examples/s (passes); peak RSS %s = %.2fx "
      "(parameters + slots); test AUC %.4f; %.1f s in all\n",
      startup, PerPass(sim_passes, 0).c_str(), Gib(sim_exit.peak_rss_bytes).c_str(),
      static_cast<double>(sim_exit.peak_rss_bytes) / state_bytes,
      sim_summary.value("test_auc", 0.0), sim_exit.seconds);
  out["sim"] = {{"startup_seconds", startup},
                {"examples_per_sec", sim_eps},
                {"examples_per_sec_by_pass", sim_passes},
                {"peak_rss_bytes", sim_exit.peak_rss_bytes},
                {"peak_rss_vs_state", static_cast<double>(sim_exit.peak_rss_bytes) / state_bytes},
                {"test_auc", sim_summary.value("test_auc", 0.0)},
                {"seconds", sim_exit.seconds}};

  // 2. Checkpoint save (the simulation's final one) and restore (a run resuming from it), against
  //    sequential I/O of the same bytes.
  if (absl::GetFlag(FLAGS_checkpoint)) {
    const int64_t bytes = DirectoryBytes(ckpt);
    const double save = sim_summary.value("checkpoint_seconds", 0.0);
    std::vector<std::string> resume = with({recsys, epochs}, model);
    resume.push_back("--checkpoint_dir=" + ckpt);
    resume.push_back("--resume");
    resume.push_back(absl::StrCat("--summary=", work, "/resume.json"));
    started = Now();
    TESSERA_ASSIGN_OR_RETURN(child, Spawn(resume, work + "/resume.log"));
    TESSERA_RETURN_IF_ERROR(Wait(child, started).status());
    TESSERA_ASSIGN_OR_RETURN(const nlohmann::json resumed, ReadJson(work + "/resume.json"));
    const double restore = resumed.value("restore_seconds", 0.0);
    TESSERA_ASSIGN_OR_RETURN(const auto io, SequentialIo(work + "/sequential.bin", bytes));
    std::printf("checkpoint %s: save %.2f s (%.2fx sequential write+fsync %.2f s), restore %.2f s "
                "(%.2fx sequential read into a reused buffer %.2f s, %.2fx into fresh memory "
                "%.2f s)\n",
                Gib(bytes).c_str(), save, io.write / save, io.write, restore, io.read / restore,
                io.read, io.read_fresh / restore, io.read_fresh);
    out["checkpoint"] = {{"bytes", bytes},
                         {"save_seconds", save},
                         {"restore_seconds", restore},
                         {"sequential_write_seconds", io.write},
                         {"sequential_read_seconds", io.read},
                         {"sequential_read_fresh_seconds", io.read_fresh},
                         {"save_vs_sequential", io.write / save},
                         {"restore_vs_sequential", io.read / restore},
                         {"restore_vs_sequential_fresh", io.read_fresh / restore}};
    fs::remove_all(ckpt);
  }

  // 3. Networked: every process's peak RSS.
  if (absl::GetFlag(FLAGS_networked)) {
    const int ports[6] = {FreePort(), FreePort(), FreePort(), FreePort(), FreePort(), FreePort()};
    const std::string spec = work + "/spec.json";
    std::ofstream(spec) << absl::StrFormat(
        R"({"cluster": {"coordinator": ["127.0.0.1:%d"], "ps": ["127.0.0.1:%d", "127.0.0.1:%d"],)"
        R"( "worker": ["127.0.0.1:%d", "127.0.0.1:%d"]}})",
        ports[0], ports[1], ports[2], ports[3], ports[4]);
    started = Now();
    std::vector<Child> ps;
    for (int t = 0; t < 2; ++t) {
      TESSERA_ASSIGN_OR_RETURN(
          Child p, Spawn({tessera, "ps", "--port", std::to_string(ports[1 + t]), "--task",
                          std::to_string(t)},
                         absl::StrCat(work, "/ps", t, ".log")));
      ps.push_back(p);
    }
    const std::vector<std::string> common =
        with({recsys, "--cluster_spec=" + spec, "--connect_timeout_s=120"}, model);
    std::vector<Child> workers;
    for (int t = 0; t < 2; ++t) {
      TESSERA_ASSIGN_OR_RETURN(Child w,
                               Spawn(with(common, {"--role=worker", absl::StrCat("--task=", t)}),
                                     absl::StrCat(work, "/worker", t, ".log")));
      workers.push_back(w);
    }
    TESSERA_ASSIGN_OR_RETURN(
        Child coordinator,
        Spawn(with(common, {"--min_workers=2", "--summary=" + work + "/net.json"}),
              work + "/coordinator.log"));
    TESSERA_ASSIGN_OR_RETURN(const Exit coordinator_exit, Wait(coordinator, started));
    std::vector<int64_t> worker_rss;
    for (const Child& w : workers) {
      TESSERA_ASSIGN_OR_RETURN(const Exit e, Wait(w, started));
      worker_rss.push_back(e.peak_rss_bytes);
    }
    std::vector<int64_t> ps_rss;
    for (const Child& p : ps) {
      kill(p.pid, SIGTERM);
      int status = 0;
      rusage usage{};
      wait4(p.pid, &status, 0, &usage);
      ps_rss.push_back(static_cast<int64_t>(usage.ru_maxrss) * 1024);
    }
    TESSERA_ASSIGN_OR_RETURN(const nlohmann::json net, ReadJson(work + "/net.json"));
    const int64_t worst_worker = std::max(worker_rss[0], worker_rss[1]);
    std::printf("networked: coordinator %s (%.2f%% of parameters + slots), workers %s and %s "
                "(worst %.2f%%), PS %s and %s; %.0f examples/s\n",
                Mib(coordinator_exit.peak_rss_bytes).c_str(),
                100.0 * coordinator_exit.peak_rss_bytes / state_bytes,
                Mib(worker_rss[0]).c_str(), Mib(worker_rss[1]).c_str(),
                100.0 * worst_worker / state_bytes, Gib(ps_rss[0]).c_str(),
                Gib(ps_rss[1]).c_str(), net.value("examples_per_sec", 0.0));
    out["networked"] = {
        {"coordinator_peak_rss_bytes", coordinator_exit.peak_rss_bytes},
        {"coordinator_vs_state", static_cast<double>(coordinator_exit.peak_rss_bytes) / state_bytes},
        {"worker_peak_rss_bytes", worker_rss},
        {"worker_vs_state", static_cast<double>(worst_worker) / state_bytes},
        {"ps_peak_rss_bytes", ps_rss},
        {"examples_per_sec", net.value("examples_per_sec", 0.0)},
        {"test_auc", net.value("test_auc", 0.0)}};
  }

  // 4. PyTorch on the same model and examples.
  const std::string torch = absl::GetFlag(FLAGS_torch);
  const bool have_torch =
      std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
  if (torch == "on" && !have_torch) {
    return absl::FailedPreconditionError("--torch=on but python3-torch is not installed");
  }
  if (torch != "off" && have_torch) {
    RecsysConfig config;
    config.num_users = users;
    config.num_items = items;
    config.num_train = absl::GetFlag(FLAGS_train_examples);
    config.num_test = absl::GetFlag(FLAGS_test_examples);
    TESSERA_ASSIGN_OR_RETURN(const RecsysData data, GenerateRecsysData(config));
    const std::string examples = work + "/examples.bin";
    TESSERA_RETURN_IF_ERROR(WriteExamples(data, examples));
    started = Now();
    TESSERA_ASSIGN_OR_RETURN(
        child, Spawn({"/usr/bin/python3", TESSERA_SOURCE_DIR "/bench/torch_recsys.py",
                      "--data=" + examples, absl::StrCat("--users=", users),
                      absl::StrCat("--items=", items), absl::StrCat("--embedding_dim=", dim),
                      absl::StrCat("--hidden=", absl::GetFlag(FLAGS_hidden)),
                      absl::StrCat("--batch_size=", absl::GetFlag(FLAGS_batch_size)), epochs},
                     work + "/torch.log"));
    TESSERA_ASSIGN_OR_RETURN(const Exit torch_exit, Wait(child, started));
    std::ifstream log(work + "/torch.log");
    std::string line, last;
    while (std::getline(log, line)) {
      if (!line.empty() && line[0] == '{') last = line;
    }
    nlohmann::json pt;
    try {
      pt = nlohmann::json::parse(last);
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat("torch.log: no result line: ", e.what()));
    }
    const std::vector<double> pt_passes =
        pt.value("examples_per_sec_by_epoch", std::vector<double>{});
    if (pt_passes.size() != sim_passes.size()) {
      return absl::DataLossError(
          absl::StrCat("torch.log: ", pt_passes.size(), " passes, not ", sim_passes.size()));
    }
    std::vector<double> ratios;
    for (size_t k = 0; k < pt_passes.size(); ++k) ratios.push_back(sim_passes[k] / pt_passes[k]);
    std::printf(
        "pytorch (%s, %d threads): model built in %.1f s; %s examples/s (passes; tessera "
        "sim %s); peak RSS %s; test AUC %.4f\n",
        pt.value("framework", std::string("?")).c_str(), pt.value("threads", 0),
        pt.value("build_seconds", 0.0), PerPass(pt_passes, 0).c_str(),
        PerPass(ratios, 2, "x").c_str(), Gib(torch_exit.peak_rss_bytes).c_str(),
        pt.value("test_auc", 0.0));
    pt["peak_rss_bytes"] = torch_exit.peak_rss_bytes;
    pt["examples_per_sec"] = pt_passes[0];  // the first pass, as the simulation's
    pt["sim_vs_pytorch"] = ratios[0];
    pt["sim_vs_pytorch_by_pass"] = ratios;
    out["pytorch"] = pt;
    if (absl::GetFlag(FLAGS_work_dir).empty()) fs::remove(examples);  // else kept, as the rest
  } else {
    std::printf("pytorch: not run (%s)\n", have_torch ? "--torch=off" : "python3-torch missing");
  }
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::bench::Main("scale", argc, argv, tessera::Run); }
