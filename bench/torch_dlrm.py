#!/usr/bin/env python3
"""The DLRM of examples/dlrm.cc in PyTorch, on the same Criteo-layout TSV files, for
bench/dlrm_vs_torch.sh's comparison (optional: needs Debian's python3-torch and python3-numpy;
nothing in the build or the tests runs it).

The model, exactly as examples/dlrm.cc builds it:
  - dense input: I1..I13 (an empty field is 0), x = log(1 + max(I, 0)); bottom MLP
    Dense(64, relu) -> Dense(D, relu) = b;
  - C1..C26: each field's bytes hashed as core/base/hash.h does (StringId = FNV-1a 64, then
    HashBucket = SplitMix64 finalizer mod --buckets; an empty field is StringId("")), looked up
    in its own table of --buckets rows of dim D: e_1..e_26;
  - interaction: [b, every pairwise dot among (b, e_1..e_26), i < j]: D + 351 features;
  - top MLP Dense(128, relu) -> Dense(64, relu) -> Dense(1) = logit; sigmoid cross-entropy;
  - dense kernels glorot_uniform, biases 0, embeddings U(-0.05, 0.05);
  - Adagrad (lr 0.05, initial accumulator 0, eps 1e-7) with sparse embedding gradients,
    batches of 512 consecutive lines in a shuffled order, one pass.
The 26 tables are one nn.Embedding of 26 * buckets rows, table k at rows [k * buckets,
(k + 1) * buckets): the same parameters and updates as 26 tables, in one lookup per batch.

Parsing and hashing are vectorised over the whole file with numpy and timed apart from
training; examples/s counts the training loop only (forward, backward, optimizer step), in wall time;
its CPU time is reported too (on a shared machine the two differ). Prints
progress, the test log-loss and AUC, and a last line of JSON:
  {"auc": .., "logloss": .., "train_examples_per_sec": .., "threads": .., ...}

  python3 bench/torch_dlrm.py --train_data=/tmp/criteo.train.tsv --test_data=/tmp/criteo.test.tsv
"""
import argparse
import gzip
import json
import sys
import time

import numpy as np
import torch

NUM_INTEGER = 13
NUM_CATEGORICAL = 26
NUM_FIELDS = 1 + NUM_INTEGER + NUM_CATEGORICAL

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)
U30, U27, U31 = np.uint64(30), np.uint64(27), np.uint64(31)
MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_2 = np.uint64(0x94D049BB133111EB)


def mix64(x):
    """core/base/hash.h's Mix64 (the SplitMix64 finalizer) on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> U30)
    x = x * MIX_1
    x = x ^ (x >> U27)
    x = x * MIX_2
    return x ^ (x >> U31)


def string_ids(buf, starts, lengths):
    """StringId (FNV-1a 64) of every field buf[starts[i] : starts[i] + lengths[i]]."""
    h = np.full(len(starts), FNV_OFFSET, dtype=np.uint64)
    for j in range(int(lengths.max(initial=0))):
        m = lengths > j
        h[m] = (h[m] ^ buf[starts[m] + j].astype(np.uint64)) * FNV_PRIME
    return h


def parse_integers(buf, starts, lengths, path):
    """Decimal integers (an optional '-'), empty fields 0."""
    value = np.zeros(len(starts), dtype=np.int64)
    negative = np.zeros(len(starts), dtype=bool)
    nonempty = lengths > 0
    negative[nonempty] = buf[starts[nonempty]] == ord("-")
    first = negative.astype(np.int64)  # skip the sign
    for j in range(int(lengths.max(initial=0))):
        m = lengths > first + j
        c = buf[starts[m] + first[m] + j].astype(np.int64) - ord("0")
        if ((c < 0) | (c > 9)).any():
            sys.exit(f"{path}: an integer field holds a character that is not a digit")
        value[m] = value[m] * 10 + c
    return np.where(negative, -value, value)


def parse_chunk(data, buckets, path, line_offset):
    """Labels, dense values and table rows of the whole lines in `data` (bytes)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    seps = np.flatnonzero((buf == 9) | (buf == 10))
    if len(seps) % NUM_FIELDS != 0 or not (buf[seps[NUM_FIELDS - 1::NUM_FIELDS]] == 10).all():
        # Find the first line with another field count, to name it.
        newlines = np.flatnonzero(buf == 10)
        tab_counts = np.add.reduceat((buf == 9).astype(np.int64),
                                     np.concatenate([[0], newlines[:-1] + 1]))
        bad = np.flatnonzero(tab_counts != NUM_FIELDS - 1)
        line = line_offset + (int(bad[0]) if len(bad) else len(newlines)) + 1
        sys.exit(f"{path}: line {line} does not have {NUM_FIELDS} tab-separated fields")
    n = len(seps) // NUM_FIELDS
    ends = seps.reshape(n, NUM_FIELDS)
    starts = np.empty_like(ends)
    starts[:, 0] = np.concatenate([[0], ends[:-1, -1] + 1])
    starts[:, 1:] = ends[:, :-1] + 1
    lengths = ends - starts

    label_ok = (lengths[:, 0] == 1) & ((buf[starts[:, 0]] == ord("0")) | (buf[starts[:, 0]] == ord("1")))
    if not label_ok.all():
        sys.exit(f"{path}: line {line_offset + int(np.flatnonzero(~label_ok)[0]) + 1}: "
                 "the label is not 0 or 1")
    labels = (buf[starts[:, 0]] - ord("0")).astype(np.float32)

    s, l = starts[:, 1:1 + NUM_INTEGER].ravel(), lengths[:, 1:1 + NUM_INTEGER].ravel()
    dense = parse_integers(buf, s, l, path).astype(np.float32).reshape(n, NUM_INTEGER)

    s, l = starts[:, 1 + NUM_INTEGER:].ravel(), lengths[:, 1 + NUM_INTEGER:].ravel()
    rows = (mix64(string_ids(buf, s, l)) % np.uint64(buckets)).astype(np.int64)
    rows = rows.reshape(n, NUM_CATEGORICAL) + np.arange(NUM_CATEGORICAL, dtype=np.int64) * buckets
    return labels, dense, rows


def read_tsv(path, buckets, chunk_bytes=64 << 20):
    """The whole file (plain, or gzip by its magic bytes), parsed in chunks of whole lines."""
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        data += b"\n"
    parts, pos, lines = [], 0, 0
    while pos < len(data):
        end = data.find(b"\n", min(pos + chunk_bytes, len(data)) - 1) + 1
        part = parse_chunk(data[pos:end], buckets, path, lines)
        lines += len(part[0])
        parts.append(part)
        pos = end
    if not parts:
        sys.exit(f"{path}: no examples")
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def auc(scores, labels):
    """Exact AUC, ties counting one half (average ranks), as core/training/metrics.h computes it."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    n = len(s)
    bounds = np.flatnonzero(np.diff(s)) + 1
    first = np.concatenate([[0], bounds])
    last = np.concatenate([bounds, [n]])
    ranks = np.repeat((first + last - 1) / 2.0 + 1.0, last - first)
    pos = y == 1
    n_pos = float(pos.sum())
    n_neg = float(n) - n_pos
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def dense_layer(fan_in, fan_out):
    layer = torch.nn.Linear(fan_in, fan_out)
    torch.nn.init.xavier_uniform_(layer.weight)  # glorot_uniform
    torch.nn.init.zeros_(layer.bias)
    return layer


class Dlrm(torch.nn.Module):
    def __init__(self, buckets, dim):
        super().__init__()
        self.embedding = torch.nn.Embedding(NUM_CATEGORICAL * buckets, dim, sparse=True)
        with torch.no_grad():
            self.embedding.weight.uniform_(-0.05, 0.05)
        self.bottom = torch.nn.Sequential(dense_layer(NUM_INTEGER, 64), torch.nn.ReLU(),
                                          dense_layer(64, dim), torch.nn.ReLU())
        vectors = 1 + NUM_CATEGORICAL
        pairs = vectors * (vectors - 1) // 2
        self.top = torch.nn.Sequential(dense_layer(dim + pairs, 128), torch.nn.ReLU(),
                                       dense_layer(128, 64), torch.nn.ReLU(), dense_layer(64, 1))
        # The pairs i < j as positions in a flattened [27, 27] matrix of dots. DLRM's reference
        # code indexes Z[:, li, lj]; index_select over the flattened rows is the same selection
        # and costs half as much in Debian's torch 1.13 (advanced indexing's backward is an
        # index_put into a zero-filled [B, 27, 27]).
        i, j = torch.triu_indices(vectors, vectors, offset=1)
        self.register_buffer("pairs", i * vectors + j, persistent=False)

    def forward(self, dense, rows):
        b = self.bottom(torch.log1p(torch.clamp(dense, min=0)))
        t = torch.cat([b.unsqueeze(1), self.embedding(rows)], dim=1)  # [B, 27, D]
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)
        return self.top(torch.cat([b, z], dim=1)).squeeze(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train_data", required=True, help="Criteo-layout TSV (plain or gzip)")
    p.add_argument("--test_data", required=True)
    p.add_argument("--buckets", type=int, default=100000, help="rows of each table")
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--initial_accumulator", type=float, default=0.0)
    p.add_argument("--epsilon", type=float, default=1e-7)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=1, help="initialization and batch order")
    p.add_argument("--progress_batches", type=int, default=500,
                   help="a progress line every this many batches")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    start = time.monotonic()
    train_y, train_x, train_rows = read_tsv(a.train_data, a.buckets)
    test_y, test_x, test_rows = read_tsv(a.test_data, a.buckets)
    preprocess_seconds = time.monotonic() - start
    n_train, n_test = len(train_y), len(test_y)
    print(f"read {n_train} train and {n_test} test examples in {preprocess_seconds:.1f} s "
          f"(parsing and hashing, not counted below)", flush=True)

    model = Dlrm(a.buckets, a.embedding_dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=a.learning_rate,
                              initial_accumulator_value=a.initial_accumulator, eps=a.epsilon)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    train_x, train_rows, train_y = (torch.from_numpy(train_x), torch.from_numpy(train_rows),
                                    torch.from_numpy(train_y))
    batches = np.random.default_rng(a.seed).permutation((n_train + a.batch_size - 1) // a.batch_size)

    start, cpu_start = time.monotonic(), time.process_time()
    interval_start, interval_loss, interval_examples = start, 0.0, 0
    for step, batch in enumerate(batches, 1):
        lo, hi = int(batch) * a.batch_size, min(n_train, (int(batch) + 1) * a.batch_size)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(train_x[lo:hi], train_rows[lo:hi]), train_y[lo:hi])
        loss.backward()
        opt.step()
        interval_loss += loss.item() * (hi - lo)
        interval_examples += hi - lo
        if step % a.progress_batches == 0 or step == len(batches):
            now = time.monotonic()
            print(f"step {step}/{len(batches)}: loss {interval_loss / interval_examples:.4f}, "
                  f"{interval_examples / (now - interval_start):.0f} examples/s", flush=True)
            interval_start, interval_loss, interval_examples = now, 0.0, 0
    train_seconds = time.monotonic() - start
    train_cpu_seconds = time.process_time() - cpu_start

    with torch.no_grad():
        logits = torch.cat([
            model(torch.from_numpy(test_x[b:b + 8192]), torch.from_numpy(test_rows[b:b + 8192]))
            for b in range(0, n_test, 8192)])
        logloss = float(torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(test_y)))
    test_auc = auc(logits.numpy(), test_y)
    eps = n_train / train_seconds
    print(f"test: logloss {logloss:.4f}, AUC {test_auc:.4f}; training {n_train} examples in "
          f"{train_seconds:.1f} s = {eps:.0f} examples/s ({a.threads} threads; "
          f"{train_cpu_seconds:.1f} s of CPU)")
    print(json.dumps({
        "auc": test_auc,
        "logloss": logloss,
        "train_examples_per_sec": eps,
        "threads": a.threads,
        "train_examples": n_train,
        "test_examples": n_test,
        "train_seconds": train_seconds,
        "train_cpu_seconds": train_cpu_seconds,
        "preprocess_seconds": preprocess_seconds,
        "framework": "pytorch " + torch.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
