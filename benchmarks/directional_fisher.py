"""Cost of one directional-Fisher evaluation uᵀF(θ)u: forward-mode JVP vs per-sample gradients.

Three ways to compute the same number (true Fisher, categorical head, labels integrated exactly):

* ``jvp``  — `neuromanifold.singular.directional_fisher`: ``torch.func.jvp`` over the N samples
  in chunks of ``JVP_CHUNK`` samples; ``jvp*`` is the same with ``chunk_size=None``: no chunk of
  its own, but the library still splits passes so that no tensor exceeds ``passes.LANE_BYTES``
  (`lane_chunk`): one pass of all N samples for the MLP, passes of 256 for the ViT.
* ``psg``  — `directional_fisher_reference`: per-sample gradients ``vmap(grad)`` of ``log p_c`` for
  every (sample, class) pair, contracted with u, in chunks of ``PSG_CHUNK`` samples (its memory
  grows as chunk × classes × #params, so the chunk must stay small for a 1M-parameter model).
* ``loop`` — a per-sample Python loop: one forward per sample, one ``autograd.grad`` per class.

``psg`` and ``loop`` are timed on the first ``PSG_SUBSET`` / ``LOOP_SUBSET`` samples and the time is
**extrapolated linearly** to N (their cost is exactly linear in the number of samples; the output
marks these rows). Each of them is checked against the JVP value on the same subset.

Models: an MLP of about 1M parameters and a small ViT-like model (patch embedding, two pre-LN
attention blocks from nn.Linear/LayerNorm/GELU, mean-pooled head), N = 1024 samples, float64,
one random unit direction over every parameter.

Method: each (model, method) runs in a fresh subprocess. Peak memory is the increase of the
process's resident-set high-water mark (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) from just
before the first call (model and data already built) to after the last; tracemalloc does not see
torch's CPU allocations. Time: one warm-up call, then the best of ``--repeats`` calls (JVP) or one
call (psg, loop). Threads fixed by ``--threads`` (default 1) so the ratios compare like with like.

Run:  python benchmarks/directional_fisher.py      (≈ 2–3 minutes on one CPU core)
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import torch
from torch import nn

from neuromanifold.singular import Categorical, directional_fisher, directional_fisher_reference

N_SAMPLES = 1024
N_CLASSES = 10
JVP_CHUNK = 64
PSG_CHUNK = 8
PSG_SUBSET = 64
LOOP_SUBSET = 16


class Block(nn.Module):
    """Pre-LN transformer block: multi-head self-attention from one qkv Linear, GELU MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        n, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).reshape(n, t, 3, self.heads, -1).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        h = h + self.proj((att @ v).transpose(1, 2).reshape(n, t, d))
        return h + self.mlp(self.ln2(h))


class TinyViT(nn.Module):
    """16×16×3 images, 4×4 patches (16 tokens), width 64, 2 blocks, 4 heads, 10 classes."""

    def __init__(self, d: int = 64, depth: int = 2, heads: int = 4, patch: int = 4) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, d)
        self.pos = nn.Parameter(0.02 * torch.randn(16, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, n = self.patch, x.shape[0]
        patches = x.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5)
        h = self.embed(patches.reshape(n, -1, 3 * p * p)) + self.pos
        return self.head(self.ln(self.blocks(h)).mean(1))


def build(name: str):
    """Model (float64, eval), parameters, a random unit direction over all of them, inputs."""
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(512, 1024),
            nn.GELU(),
            nn.Linear(1024, 512),
            nn.GELU(),
            nn.Linear(512, N_CLASSES),
        )
        x = torch.randn(N_SAMPLES, 512)
    elif name == "vit":
        model = TinyViT()
        x = torch.randn(N_SAMPLES, 3, 16, 16)
    else:
        raise ValueError(f"unknown model {name!r}; expected 'mlp' or 'vit'")
    model = model.double().eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    gen = torch.Generator().manual_seed(1)
    u = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in params.items()}
    norm = math.sqrt(sum(float((v * v).sum()) for v in u.values()))
    return model, params, {k: v / norm for k, v in u.items()}, x.double()


def loop_fisher(model: nn.Module, params, u, x: torch.Tensor) -> float:
    """Per-sample Python loop: (1/n) Σ_i Σ_c p_c (∇ log p_c(x_i) · u)²."""
    names = list(params)
    leaves = [params[k].clone().requires_grad_(True) for k in names]
    total = 0.0
    for i in range(x.shape[0]):
        out = torch.func.functional_call(
            model, dict(zip(names, leaves, strict=True)), (x[i : i + 1],)
        )
        logp = torch.log_softmax(out, dim=-1)[0]
        p = logp.exp().detach()
        for c in range(logp.shape[0]):
            grads = torch.autograd.grad(logp[c], leaves, retain_graph=True)
            proj = sum(float((g * u[k]).sum()) for g, k in zip(grads, names, strict=True))
            total += float(p[c]) * proj * proj
    return total / x.shape[0]


def worker(model_name: str, method: str, repeats: int, threads: int) -> dict:
    """Time and peak-memory one method in this (fresh) process."""
    torch.set_num_threads(threads)
    model, params, u, x = build(model_name)
    n_params = sum(v.numel() for v in params.values())
    fam = Categorical()
    if method in ("jvp", "jvp*"):
        xs = x
        chunk = JVP_CHUNK if method == "jvp" else None

        def call(z: torch.Tensor) -> float:
            return float(directional_fisher(model, params, u, z, fam, chunk_size=chunk))
    elif method == "psg":
        xs = x[:PSG_SUBSET]

        def call(z: torch.Tensor) -> float:
            return float(
                directional_fisher_reference(model, params, u, z, fam, chunk_size=PSG_CHUNK)
            )
    elif method == "loop":
        xs = x[:LOOP_SUBSET]

        def call(z: torch.Tensor) -> float:
            return loop_fisher(model, params, u, z)
    else:
        raise ValueError(f"unknown method {method!r}")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    is_jvp = method.startswith("jvp")
    call(xs if is_jvp else xs[:PSG_CHUNK])  # warm-up
    times = []
    for _ in range(repeats if is_jvp else 1):
        t0 = time.perf_counter()
        value = call(xs)
        times.append(time.perf_counter() - t0)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    check = float(directional_fisher(model, params, u, xs, fam))  # JVP on the same samples
    return {
        "model": model_name,
        "method": method,
        "n_params": n_params,
        "value": value,
        "rel_err_vs_jvp": abs(value - check) / abs(check),
        "time_s": min(times) * x.shape[0] / xs.shape[0],
        "n_timed": int(xs.shape[0]),
        "peak_mb": (rss1 - rss0) / 1024.0,
    }


def run(model_name: str, method: str, repeats: int, threads: int) -> dict:
    """Run `worker` in a subprocess and parse its JSON line."""
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        model_name,
        method,
        "--repeats",
        str(repeats),
        "--threads",
        str(threads),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {model_name}/{method} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    """Print the table and the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=2, metavar=("MODEL", "METHOD"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="mlp,vit")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeats, args.threads)))
        return
    print(
        f"one directional-Fisher evaluation, categorical ({N_CLASSES} classes), N = {N_SAMPLES}, "
        f"float64, {args.threads} thread(s); jvp: chunks of {JVP_CHUNK} samples, jvp*: "
        f"chunk_size=None (split only by LANE_BYTES); per-sample-gradient chunk {PSG_CHUNK}; "
        "peak = RSS high-water increase"
    )
    for model_name in args.models.split(","):
        methods = ("jvp", "jvp*", "psg", "loop")
        res = {m: run(model_name, m, args.repeats, args.threads) for m in methods}
        print(f"\n{model_name}: {res['jvp']['n_params']:,} parameters")
        for m, r in res.items():
            note = ""
            if r["n_timed"] != N_SAMPLES:
                scale = N_SAMPLES // r["n_timed"]
                note = f"  [timed on {r['n_timed']} samples, extrapolated ×{scale}]"
            print(
                f"  {m:4s}  time {r['time_s']:9.3f} s   peak {r['peak_mb']:8.1f} MB   "
                f"rel. diff to JVP {r['rel_err_vs_jvp']:.1e}{note}"
            )
        for j in ("jvp", "jvp*"):
            t_jvp, m_jvp = res[j]["time_s"], max(res[j]["peak_mb"], 1e-3)
            print(
                f"  vs {j:4s}: time psg/{j} = {res['psg']['time_s'] / t_jvp:7.1f}×   "
                f"time loop/{j} = {res['loop']['time_s'] / t_jvp:7.1f}×   "
                f"peak psg/{j} = {res['psg']['peak_mb'] / m_jvp:6.1f}×"
            )


if __name__ == "__main__":
    main()
