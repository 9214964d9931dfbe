// kernels: the arithmetic of a training step that is compiled per instruction set
// (core/model/internal/kernels.h) in every variant this build and CPU run — the baseline, and
// x86-64-v3 / x86-64-v4 in a portable build — interleaved in one run, on the shapes of the
// reference workloads' steps:
//   recsys         batch 512: [512, 64] x [64, 64] hidden layer (ReLU), [512, 64] x [64, 1]
//                  logits; Adagrad on 1024 embedding rows of 32 and on the dense parameters
//   fashion_mnist  batch 128: 784 -> 256 -> 128 -> 10 (ReLU between); Adam on every parameter
//   recsys_rfc     the RFC-scale recsys of bench/scale, batch 512: [512, 2000] x [2000, 64]
//                  (two 1000-wide embeddings concatenated; dX too, for the embeddings' rows),
//                  [512, 64] x [64, 1]; Adagrad on 1024 embedding rows of 1000 — the arithmetic
//                  no implementation of that step avoids, so 2 x 512 / its time is what two
//                  workers on two cores could reach at best
// One "step" is each layer's forward product and ReLU, its backward products (dW, and dX but
// for the first layer) and ReLU, and the optimizer over the step's rows. Single-threaded; the
// figure per variant is the median round.
//
//   kernels --rounds=7
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "core/model/internal/kernels.h"

ABSL_FLAG(int32_t, rounds, 7, "rounds over every variant");
ABSL_FLAG(double, seconds, 0.3, "time per variant and workload in a round");

namespace tessera {
namespace {

using bench::Median;
using kernels::Kernels;

struct Layer {
  int64_t in, out;
  bool relu;            // a ReLU after the product
  bool input_gradient;  // dX too (not for the first layer)
};

struct Workload {
  std::string name;
  int64_t batch;
  std::vector<Layer> layers;
  bool adam;                 // else Adagrad
  int64_t embedding_floats;  // Adagrad on this many embedding floats, a row at a time
  int64_t embedding_row = 32;
};

// Buffers of one layer: x [batch, in], w [in, out], y and dz [batch, out], dw, dx, and the
// optimizer's slots for w (Adagrad: s1; Adam: s1, s2).
struct Buffers {
  std::vector<float> x, w, y, dz, dw, dx, s1, s2;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One step of `workload` with `kernels`.
void Step(const Kernels& kernels, const Workload& workload, std::vector<Buffers>& layers,
          Buffers& embeddings) {
  const int64_t m = workload.batch;
  for (size_t i = 0; i < workload.layers.size(); ++i) {
    const Layer& l = workload.layers[i];
    Buffers& b = layers[i];
    kernels.mat_mul(m, l.in, l.out, b.x.data(), l.in, b.w.data(), l.out, b.y.data(), l.out);
    if (l.relu) kernels.relu(b.y.data(), b.y.data(), m * l.out);
  }
  for (size_t i = workload.layers.size(); i-- > 0;) {
    const Layer& l = workload.layers[i];
    Buffers& b = layers[i];
    if (l.relu) kernels.relu_backward(b.y.data(), b.dz.data(), b.dz.data(), m * l.out);
    kernels.add_mat_mul_at_b(m, l.in, l.out, b.x.data(), l.in, b.dz.data(), l.out, b.dw.data(),
                             l.out);
    if (l.input_gradient) {
      kernels.add_mat_mul_a_bt(m, l.in, l.out, b.dz.data(), l.out, b.w.data(), l.out, b.dx.data(),
                               l.in);
    }
    // Small steps, so that the values stay in range over millions of them.
    if (workload.adam) {
      kernels.adam(b.w.data(), b.s1.data(), b.s2.data(), b.dw.data(), l.in * l.out, 1e-9f, 0.1f,
                   0.001f, 1e-7f);
    } else {
      kernels.adagrad(b.w.data(), b.s1.data(), b.dw.data(), l.in * l.out, 1e-9f, 1e-7f);
    }
  }
  const int64_t row = workload.embedding_row;
  for (int64_t at = 0; at < workload.embedding_floats; at += row) {
    kernels.adagrad(embeddings.w.data() + at, embeddings.s1.data() + at, embeddings.dw.data() + at,
                    row, 1e-9f, 1e-7f);
  }
}

// Microseconds per step of `workload` with `kernels`, over about `seconds`.
double MicrosPerStep(const Kernels& kernels, const Workload& workload, std::vector<Buffers>& layers,
                     Buffers& embeddings, double seconds) {
  int64_t steps = 0;
  const double start = Now();
  double now = start;
  while (now - start < seconds) {
    Step(kernels, workload, layers, embeddings);
    ++steps;
    now = Now();
  }
  return (now - start) * 1e6 / steps;
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  const std::vector<Workload> workloads = {
      {"recsys", 512, {{64, 64, true, false}, {64, 1, false, true}}, false, 1024 * 32},
      {"fashion_mnist",
       128,
       {{784, 256, true, false}, {256, 128, true, true}, {128, 10, false, true}},
       true,
       0},
      {"recsys_rfc",
       512,
       {{2000, 64, true, true}, {64, 1, false, true}},
       false,
       1024 * 1000,
       1000},
  };
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  const auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = u(rng);
    return v;
  };
  const auto zeros = [](int64_t n) { return std::vector<float>(n, 0.0f); };
  std::map<std::string, std::vector<Buffers>> layers;
  std::map<std::string, Buffers> embeddings;
  for (const Workload& w : workloads) {
    for (const Layer& l : w.layers) {
      layers[w.name].push_back({random(w.batch * l.in), random(l.in * l.out),
                                random(w.batch * l.out), random(w.batch * l.out),
                                random(l.in * l.out), random(w.batch * l.in), zeros(l.in * l.out),
                                zeros(l.in * l.out)});
    }
    const int64_t e = w.embedding_floats;
    embeddings[w.name] = {{}, random(e), {}, {}, random(e), {}, zeros(e), {}};
  }
  const std::vector<const Kernels*> variants = kernels::RunnableKernels();
  std::printf(
      "variants: %s; chosen: %s\n",
      absl::StrJoin(variants, ", ", [](std::string* out, const Kernels* k) { out->append(k->isa); })
          .c_str(),
      kernels::ChosenKernels().isa);
  std::map<std::string, std::map<std::string, std::vector<double>>> micros;  // workload, isa
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    for (const Workload& w : workloads) {
      for (const Kernels* k : variants) {
        micros[w.name][k->isa].push_back(
            MicrosPerStep(*k, w, layers[w.name], embeddings[w.name], absl::GetFlag(FLAGS_seconds)));
      }
    }
  }
  for (const Workload& w : workloads) {
    const double baseline = Median(micros[w.name]["baseline"]);
    for (const Kernels* k : variants) {
      const double median = Median(micros[w.name][k->isa]);
      std::printf("%-14s %-10s %8.1f us per step (median of %d), %.2fx the baseline's speed\n",
                  w.name.c_str(), k->isa, median, absl::GetFlag(FLAGS_rounds), baseline / median);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("kernels", argc, argv, tessera::Run);
}
