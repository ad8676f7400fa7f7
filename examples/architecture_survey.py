"""Which modules and gauges the whole-model read recognises, on tiny models of common families.

Reads small randomly initialised models — convolutional networks written here (a ResNet with
BatchNorm and in-place ReLU, LeNet with max pooling and a flatten, a global-average-pooled CNN,
a GroupNorm CNN, a MobileNet-style block with a depthwise conv and squeeze-excitation, a
ConvNeXt-style block) and, when ``transformers`` is installed, Hugging Face models built from
configs (nothing is downloaded) — and prints per model: parameters, seconds, the modules the read
does not cover, the read's note, and the read's records by detector, class and order.

Probe-set size: a K-FAC factor summed from fewer rows than its side has a kernel whatever the
weights are (`neuromanifold.singular.probe_rank`). With too few samples a random model shows
"genuine singularities" that are only the probe set's: the sequence classifiers' heads read one
pooled position, so an MLP's G gets N·(classes − 1) rows against its width (128 for GPT-2 and
GPT-J here; 24 samples gave every text classifier 2–6 such records). The probe sets below are
large enough that no factor is rank-limited and no such record appears; a read that is
rank-limited says so in its note.

Run:  python examples/architecture_survey.py            (a few minutes on one core)
      python examples/architecture_survey.py --only resnet lenet gpt_neox
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

N_IMAGES = 160
"""Probe images of the CNNs: above the 129-dimensional A factor of groupnorm_cnn's head."""
N_TEXTS = 96
"""Probe sequences of the text models: N·(classes − 1) = 192 rows for the 128-wide MLPs' G."""


class _Block(nn.Module):
    """torchvision-style basic block: in-place ReLU module reused, BatchNorm, optional shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else None
        )

    def forward(self, x: Tensor) -> Tensor:
        y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(y + (x if self.down is None else self.down(x)))


def resnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, 1, 1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        _Block(8, 8, 1),
        _Block(8, 16, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


class LeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 6, 3, padding=1)
        self.fc1 = nn.Linear(6 * 2 * 2, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.view(x.shape[0], -1))))


def gap_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.ReLU(),
        nn.Conv2d(4, 6, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 10),
    )


def groupnorm_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3),
        nn.GroupNorm(2, 8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )


class MobileNetBlock(nn.Module):
    """Expand, depthwise, squeeze-excitation, project (BatchNorm, Hardswish)."""

    def __init__(self, c: int = 8, e: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, c, 3, 2, 1)
        self.expand = nn.Conv2d(c, c * e, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c * e)
        self.dw = nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e, bias=False)
        self.bn2 = nn.BatchNorm2d(c * e)
        self.se1 = nn.Conv2d(c * e, c, 1)
        self.se2 = nn.Conv2d(c, c * e, 1)
        self.proj = nn.Conv2d(c * e, c, 1, bias=False)
        self.head = nn.Linear(c, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        y = F.hardswish(self.bn2(self.dw(F.hardswish(self.bn1(self.expand(x))))))
        y = y * F.hardsigmoid(self.se2(F.relu(self.se1(y.mean((2, 3), keepdim=True)))))
        return self.head((x + self.proj(y)).mean((2, 3)))


class ConvNeXtBlock(nn.Module):
    """Depthwise 7×7, channels-last LayerNorm and MLP, layer scale kept on the block."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, d, 2, 2)
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Linear(d, 4 * d)
        self.pw2 = nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.full((d,), 0.5))
        self.head = nn.Linear(d, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        y = self.pw2(F.gelu(self.pw1(self.norm(self.dw(x).permute(0, 2, 3, 1))))) * self.gamma
        return self.head((x + y.permute(0, 3, 1, 2)).mean((2, 3)))


CNNS: dict[str, Callable[[], nn.Module]] = {
    "resnet": resnet,
    "lenet": LeNet,
    "gap_cnn": gap_cnn,
    "groupnorm_cnn": groupnorm_cnn,
    "mobilenet_block": MobileNetBlock,
    "convnext_block": ConvNeXtBlock,
}

HF: dict[str, tuple[str, str, dict]] = {
    "llama": ("LlamaConfig", "LlamaForSequenceClassification", {"num_key_value_heads": 2}),
    "qwen2": ("Qwen2Config", "Qwen2ForSequenceClassification", {"num_key_value_heads": 2}),
    "qwen3": (  # per-head q_norm/k_norm: qk-norm-rescale instead of the QK rotation
        "Qwen3Config",
        "Qwen3ForSequenceClassification",
        {"head_dim": 8, "num_key_value_heads": 2},
    ),
    "olmo2": (  # q_norm/k_norm over all heads
        "Olmo2Config",
        "Olmo2ForSequenceClassification",
        {"eos_token_id": 1},
    ),
    "gemma": (
        "GemmaConfig",
        "GemmaForSequenceClassification",
        {"head_dim": 8, "num_key_value_heads": 2},
    ),
    "phi": ("PhiConfig", "PhiForSequenceClassification", {}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForSequenceClassification", {"rotary_pct": 0.25}),
    "gptj": (
        "GPTJConfig",
        "GPTJForSequenceClassification",
        {"n_embd": 32, "n_layer": 1, "n_head": 4, "n_positions": 32, "rotary_dim": 4},
    ),
    "opt": (
        "OPTConfig",
        "OPTForSequenceClassification",
        {"ffn_dim": 64, "word_embed_proj_dim": 32},
    ),
    "gpt2": (
        "GPT2Config",
        "GPT2ForSequenceClassification",
        {"n_embd": 32, "n_layer": 1, "n_head": 4, "n_positions": 32},
    ),
    "gpt2_lm": (  # next-token logits (N, T, vocab): categorical at every position
        "GPT2Config",
        "GPT2LMHeadModel",
        {"n_embd": 32, "n_layer": 1, "n_head": 4, "n_positions": 32},
    ),
    "bert": ("BertConfig", "BertForSequenceClassification", {}),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertForSequenceClassification",
        {"dim": 32, "hidden_dim": 64, "n_layers": 1, "n_heads": 4},
    ),
}
HF_COMMON = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "max_position_embeddings": 32,
    "num_labels": 3,
    "pad_token_id": 0,
}


def _hf_model(name: str) -> tuple[nn.Module, Tensor] | None:
    from neuromanifold.io import TensorOutput, import_transformers

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transformers = import_transformers()
    except ImportError:
        return None
    config_name, model_name, extra = HF[name]
    cfg = getattr(transformers, config_name)(**{**HF_COMMON, **extra})
    cfg._attn_implementation = "eager"
    model = TensorOutput(getattr(transformers, model_name)(cfg)).eval()  # built in train mode
    x = torch.randint(1, 64, (N_TEXTS, 6), generator=torch.Generator().manual_seed(0))
    return model, x


def survey(name: str) -> str:
    torch.manual_seed(0)
    if name in CNNS:
        model = CNNS[name]().double().eval()
        x = torch.randn(N_IMAGES, 1, 8, 8, dtype=torch.float64)
    else:
        built = _hf_model(name)
        if built is None:
            return f"{name:<16} skipped (transformers is not installed)"
        model, x = built
    params = sum(p.numel() for p in model.parameters())
    t0 = time.perf_counter()
    try:
        reading = read(model, x, Categorical(), progress=False)
    except (ValueError, RuntimeError, TypeError) as err:  # the read's message, one line
        return f"{name:<16} {params:>8} params  read failed: {str(err).splitlines()[0]}"
    seconds = time.perf_counter() - t0
    records = Counter(
        f"{r.detector}:{r.klass}" + (f"(k={r.k})" if r.k is not None else "")
        for r in reading.directions
    )
    uncovered = ", ".join(f"{n.name} ({n.type})" for n in reading.not_covered) or "—"
    lines = [f"{name:<16} {params:>8} params  {seconds:5.1f} s  not covered: {uncovered}"]
    lines += [f"    note: {reading.note}"] if reading.note else []
    lines += [f"    {count} × {kind}" for kind, count in sorted(records.items())]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=[*CNNS, *HF], default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.only or [*CNNS, *HF]:
        print(survey(name), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
