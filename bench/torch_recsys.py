#!/usr/bin/env python3
"""The recsys reference model in PyTorch, for bench/scale's comparison (optional: needs Debian's
python3-torch; nothing in the build or the tests runs it).

The same model as tessera/workloads/reference_models.h's RecsysModelSpec: user and item embeddings
(uniform +-0.05) -> concat -> Dense(hidden, relu) -> Dense(1), sigmoid cross-entropy, Adagrad
(learning rate and initial accumulator as given) with sparse embedding gradients, batches of
--batch_size over the training examples bench/scale wrote (shuffled once; --epochs passes, one
by default), then the test AUC. Prints one JSON line: build_seconds (model and optimizer state),
examples_per_sec (and examples_per_sec_by_epoch), train_seconds, test_auc and peak_rss_bytes.

  python3 bench/torch_recsys.py --data=/tmp/recsys.bin --users=600000 --items=60000 \
      --embedding_dim=1000 --hidden=64
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch


def auc(scores, labels):
    """Exact AUC (ties count one half), as core/training/metrics.h computes it."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    y = labels[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    pos = y == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


class Recsys(torch.nn.Module):
    def __init__(self, users, items, dim, hidden):
        super().__init__()
        self.user = torch.nn.Embedding(users, dim, sparse=True)
        self.item = torch.nn.Embedding(items, dim, sparse=True)
        with torch.no_grad():
            self.user.weight.uniform_(-0.05, 0.05)
            self.item.weight.uniform_(-0.05, 0.05)
        self.hidden = torch.nn.Linear(2 * dim, hidden)
        self.out = torch.nn.Linear(hidden, 1)

    def forward(self, u, i):
        x = torch.cat([self.user(u), self.item(i)], dim=1)
        return self.out(torch.relu(self.hidden(x))).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--users", type=int, required=True)
    p.add_argument("--items", type=int, required=True)
    p.add_argument("--embedding_dim", type=int, required=True)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--learning_rate", type=float, default=0.1)
    p.add_argument("--initial_accumulator", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=0, help="0: every core")
    p.add_argument("--epochs", type=int, default=1,
                   help="passes over the training examples; examples_per_sec_by_epoch has each")
    a = p.parse_args()
    # Every core, as the tessera simulation uses (Debian's build defaults to one thread).
    torch.set_num_threads(a.threads if a.threads > 0 else os.cpu_count())

    # The file: int64 n_train, int64 n_test, then users, items (int64) and labels (float32) of
    # the training examples, then the same of the test examples.
    raw = open(a.data, "rb").read()
    n_train, n_test = np.frombuffer(raw, dtype=np.int64, count=2)
    off = 16

    def take(dtype, n):
        nonlocal off
        arr = np.frombuffer(raw, dtype=dtype, count=n, offset=off)
        off += arr.nbytes
        return arr

    tu, ti, tl = take(np.int64, n_train), take(np.int64, n_train), take(np.float32, n_train)
    eu, ei, el = take(np.int64, n_test), take(np.int64, n_test), take(np.float32, n_test)

    start = time.monotonic()
    model = Recsys(a.users, a.items, a.embedding_dim, a.hidden)
    opt = torch.optim.Adagrad(model.parameters(), lr=a.learning_rate,
                              initial_accumulator_value=a.initial_accumulator)
    build_seconds = time.monotonic() - start  # Adagrad allocates its accumulators here

    loss_fn = torch.nn.BCEWithLogitsLoss()
    order = np.random.default_rng(1).permutation(int(n_train))
    users, items, labels = (torch.from_numpy(tu[order].copy()), torch.from_numpy(ti[order].copy()),
                            torch.from_numpy(tl[order].copy()))
    start = time.monotonic()
    by_epoch = []
    for _ in range(a.epochs):
        epoch_start = time.monotonic()
        for b in range(0, int(n_train), a.batch_size):
            u, i = users[b:b + a.batch_size], items[b:b + a.batch_size]
            y = labels[b:b + a.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(u, i), y)
            loss.backward()
            opt.step()
        by_epoch.append(float(n_train) / (time.monotonic() - epoch_start))
    train_seconds = time.monotonic() - start

    with torch.no_grad():
        scores = np.concatenate([
            model(torch.from_numpy(eu[b:b + 4096].copy()),
                  torch.from_numpy(ei[b:b + 4096].copy())).numpy()
            for b in range(0, int(n_test), 4096)])
    print(json.dumps({
        "framework": "pytorch " + torch.__version__,
        "threads": torch.get_num_threads(),
        "build_seconds": build_seconds,
        "train_seconds": train_seconds,
        "examples_per_sec": float(n_train) * a.epochs / train_seconds,
        "examples_per_sec_by_epoch": by_epoch,
        "test_auc": auc(scores, np.asarray(el)),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
