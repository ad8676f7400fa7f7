"""Whole-model read of a Hugging Face BERT-style encoder loaded from a local directory.

A tiny ``BertForSequenceClassification`` is built from a config (nothing is downloaded), saved
with ``save_pretrained`` and loaded back through `neuromanifold.io.load_model`. The read must
report, from the architecture alone: the LayerNorm-kernel flat gauge on every LayerNorm → Linear
pair, the per-head QK rotation and VO rescale as curved gauges, the unseen embedding rows as flat,
and a planted dead feed-forward unit at order 2; the model is never mutated.
"""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from neuromanifold.io import TensorOutput, import_transformers, load_model
from neuromanifold.singular.detectors.attention import AttentionDetector
from neuromanifold.singular.detectors.layernorm import LayerNormReachDetector, layernorm_kernel
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

try:
    transformers = import_transformers()
except ImportError:
    pytest.skip("transformers is not installed", allow_module_level=True)

COS_MIN = 0.9999  # |cos(a*, bottom eigenvector of the consumer's A)|, issue 5
KERNEL_ATOL = 1e-12  # |⟨a*, ā⟩| relative to ‖ā‖ on every probe token (exact law, float64)
EXACT = {"atol": 1e-12, "rtol": 0.0}  # float64 agreement of two exact computations
K_HAT_TOL = 0.05
# |⟨a*, ā⟩| relative to max ‖ā‖ when the model runs in float32 (about 80 float32 ulps)
KERNEL_RTOL_FLOAT32 = 1e-5
R2_MIN = 0.99
N_LAYERS, N_HEADS, HIDDEN, VOCAB, MAX_POS, SEQ, N = 2, 2, 16, 40, 12, 6, 24


def _config(layers: int = N_LAYERS, **extra):
    """The tiny BERT configuration shared by every test here (``extra`` adds or overrides)."""
    base = {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": layers,
        "num_attention_heads": N_HEADS,
        "intermediate_size": 2 * HIDDEN,
        "max_position_embeddings": MAX_POS,
    }
    return transformers.BertConfig(**{**base, **extra})


def _bert(seed: int = 0) -> nn.Module:
    """A tiny BERT classifier with LayerNorm parameters moved off their initial (1, 0)."""
    torch.manual_seed(seed)
    cfg = _config(
        type_vocab_size=1, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    model = transformers.BertForSequenceClassification(cfg)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):  # distinct γ, β per norm, as after training
                mod.weight.copy_(0.5 + torch.rand(mod.weight.shape, generator=gen))
                mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=gen))
    return model.eval()


def _tokens(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 30, (N, SEQ), generator=gen)  # ids ≥ 30 never occur


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[nn.Module, str]:
    model = _bert()
    path = tmp_path_factory.mktemp("bert")
    model.save_pretrained(str(path))
    return model, str(path)


def _expected_ln_pairs() -> dict[str, str]:
    """consumer → the LayerNorm whose output it reads (from BERT's architecture)."""
    pre = "model.bert."
    out = {}
    for i in range(N_LAYERS):
        layer = f"{pre}encoder.layer.{i}."
        prev = (
            f"{pre}embeddings.LayerNorm"
            if i == 0
            else f"{pre}encoder.layer.{i - 1}.output.LayerNorm"
        )
        for proj in ("query", "key", "value"):
            out[f"{layer}attention.self.{proj}"] = prev
        out[f"{layer}intermediate.dense"] = f"{layer}attention.output.LayerNorm"
    out[f"{pre}pooler.dense"] = f"{pre}encoder.layer.{N_LAYERS - 1}.output.LayerNorm"
    return out


def test_directory_loads_through_io(saved, tmp_path) -> None:
    model, path = saved
    net = load_model(None, architecture=path)  # tensor_output="auto" wraps HF models
    assert isinstance(net, TensorOutput) and not net.training
    inner = net.model
    assert type(inner).__name__ == "BertForSequenceClassification"  # the head is kept
    assert inner.config._attn_implementation == "eager"
    ref = model.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in inner.state_dict().items())
    x = _tokens()
    with torch.no_grad():  # eager (loaded) vs sdpa (saved): the same function, in float64
        got = copy.deepcopy(net).double()(x)
        torch.testing.assert_close(got, copy.deepcopy(model).double()(x).logits, **EXACT)
    # weights given separately: built from the directory's config, loaded from the file
    again = load_model(f"{path}/model.safetensors", architecture=path, tensor_output=False)
    assert type(again).__name__ == "BertForSequenceClassification"
    assert all(torch.equal(v, ref[k]) for k, v in again.state_dict().items())
    sdpa = load_model(None, architecture=path, attn_implementation="sdpa")
    assert sdpa.model.config._attn_implementation == "sdpa"
    # a weights file of another model is refused with every problem listed
    save_file({"weight": torch.zeros(2, 2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match=r"does not fit BertForSequenceClassification: missing"):
        load_model(tmp_path / "other.safetensors", architecture=path)
    with pytest.raises(ValueError, match=r"is a directory without config\.json"):
        load_model(None, architecture=str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read the Hugging Face config in"):
        load_model(None, architecture=str(tmp_path))
    with pytest.raises(TypeError, match="tensor_output must be True, False or 'auto'; got 'yes'"):
        load_model(None, architecture=path, tensor_output="yes")


def test_tied_weights_stored_once_load_and_stay_tied(tmp_path) -> None:
    """save_pretrained stores a tied decoder once (under the embedding's name); loading that file
    into the directory's architecture fills the alias and keeps the tie."""
    torch.manual_seed(1)
    cfg = _config(layers=1)
    mlm = transformers.BertForMaskedLM(cfg).eval()
    mlm.save_pretrained(str(tmp_path))
    from safetensors.torch import load_file

    assert "cls.predictions.decoder.weight" not in load_file(str(tmp_path / "model.safetensors"))
    back = load_model(tmp_path / "model.safetensors", architecture=str(tmp_path)).model
    assert back.cls.predictions.decoder.weight is back.bert.embeddings.word_embeddings.weight
    ref = mlm.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in back.state_dict().items())


def test_tensor_output_picks_and_errors(saved) -> None:
    model, _ = saved
    x = _tokens()
    with torch.no_grad():
        out = model(x, output_hidden_states=True)
        hidden = TensorOutput(model.bert)(x)
        torch.testing.assert_close(hidden, model.bert(x).last_hidden_state, atol=0, rtol=0)
        torch.testing.assert_close(TensorOutput(model)(x), out.logits, atol=0, rtol=0)
        keyed = TensorOutput(model.bert, key="pooler_output")(x)
        torch.testing.assert_close(keyed, model.bert(x).pooler_output, atol=0, rtol=0)
    with pytest.raises(TypeError, match="has no Tensor under key 'nope'"):
        TensorOutput(model.bert, key="nope")(x)

    class _Dict(nn.Module):
        def forward(self, x: torch.Tensor) -> dict:
            return {"a": x}

    with pytest.raises(TypeError, match="cannot pick a Tensor from model output of type dict"):
        TensorOutput(_Dict())(x)
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module; got str"):
        TensorOutput("bert")


def test_bert_read_reports_the_architectural_gauges(saved) -> None:
    _, path = saved
    attn = "eager"
    net = load_model(None, architecture=path, attn_implementation=attn)
    x = _tokens()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    reading = read(net, x, Categorical(), progress=False)

    # the model is not mutated (values, dtype, mode, hooks, attention choice)
    after = net.state_dict()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == torch.float32 for k in after)
    assert not net.training and net.model.config._attn_implementation == attn
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in net.modules())

    # every LayerNorm → Linear pair: the LN-kernel flat gauge, aligned with the closed form
    ln = {r.layers[0]: r for r in reading.directions if r.detector == "ln-kernel"}
    expected = _expected_ln_pairs()
    assert set(ln) == set(expected)
    for consumer, norm in expected.items():
        rec = ln[consumer]
        assert rec.info["norm"] == norm and rec.klass == "flat_gauge"
        assert rec.info["closed_form_cos"] >= COS_MIN
    # the closed form itself, checked on the consumers' actual inputs in the caller's model
    mods = dict(net.named_modules())
    inputs: dict[str, torch.Tensor] = {}
    hooks = [
        mods[c].register_forward_pre_hook(lambda _m, a, c=c: inputs.setdefault(c, a[0]))
        for c in expected
    ]
    with torch.no_grad():
        net(x)
    for h in hooks:
        h.remove()
    for consumer, norm in expected.items():
        a_bar = inputs[consumer].double().reshape(-1, HIDDEN)
        a_bar = torch.cat([a_bar, torch.ones(a_bar.shape[0], 1, dtype=torch.float64)], 1)
        a_star = layernorm_kernel(mods[norm].weight.detach(), mods[norm].bias.detach())
        # float32 forward: the law holds to float32 rounding on the caller's model
        assert float((a_bar @ a_star).abs().max()) <= KERNEL_RTOL_FLOAT32 * float(
            a_bar.norm(dim=1).max()
        )

    # per-head QK rotation and VO rescale: curved gauges, one per head and layer
    kinds = Counter((r.detector, r.klass) for r in reading.directions)
    assert kinds[("qk-rotation", "curved_gauge")] == N_LAYERS * N_HEADS
    assert kinds[("vo-rescale", "curved_gauge")] == N_LAYERS * N_HEADS
    assert kinds[("ce-shift", "flat_gauge")] == 1
    vo = next(r for r in reading.directions if r.detector == "vo-rescale")
    assert vo.layers == (
        "model.bert.encoder.layer.0.attention.self.value",
        "model.bert.encoder.layer.0.attention.output.dense",
    )

    # embedding rows never indexed by the probe set
    emb = {r.layers[0]: r for r in reading.directions if r.detector == "embedding-unseen"}
    word = emb["model.bert.embeddings.word_embeddings"]
    assert word.info["unseen_rows"] == VOCAB - int(torch.unique(x).numel())
    assert emb["model.bert.embeddings.position_embeddings"].info["unseen_rows"] == MAX_POS - SEQ
    assert all(r.klass == "flat_gauge" for r in emb.values())
    assert "model.bert.embeddings.token_type_embeddings" not in emb  # its one row is used

    assert reading.not_covered == ()  # every parameterised module has a detector
    assert not [r for r in reading.directions if r.klass == "genuine_singularity"]


def test_bert_planted_dead_ffn_unit_reads_order_two() -> None:
    """A dead intermediate unit (row of intermediate.dense, column of output.dense) behind HF's
    GELUActivation module: the duality chain spans both blocks and reads k = 2."""
    model = _bert(seed=3)
    layer = model.bert.encoder.layer[1]
    j = 5
    with torch.no_grad():
        layer.intermediate.dense.weight[j] = 0.0
        layer.intermediate.dense.bias[j] = 0.0
        layer.output.dense.weight[:, j] = 0.0
    net = TensorOutput(copy.deepcopy(model))
    # the chain is the first candidate in reading order (eigenvalue ratio 0); gauges come last
    reading = read(net, _tokens(seed=1), Categorical(), progress=False, max_directions=4)
    (rec,) = [r for r in reading.directions if r.klass == "genuine_singularity"]
    pre = "model.bert.encoder.layer.1."
    assert rec.detector == "duality"
    assert rec.layers == (f"{pre}intermediate.dense", f"{pre}output.dense")
    assert rec.k == 2 and abs(rec.k_hat - 2) <= K_HAT_TOL and rec.r2 >= R2_MIN


def test_sdpa_attention_reads_the_same_gauges(saved) -> None:
    """With ``attn_implementation="sdpa"`` the forward-mode read runs through SDPA's math kernel
    and gives the same attention gauges as the eager implementation."""
    _, path = saved
    x = _tokens()
    got = {}
    for attn in ("eager", "sdpa"):
        net = load_model(None, architecture=path, attn_implementation=attn)
        reading = read(net, x, Categorical(), detectors=[AttentionDetector()], progress=False)
        got[attn] = [(r.detector, r.layers, r.k, r.klass) for r in reading.directions]
    assert got["sdpa"] == got["eager"]
    assert Counter(klass for *_, klass in got["sdpa"]) == {"curved_gauge": 2 * N_LAYERS * N_HEADS}


def test_tied_decoder_is_read_on_the_shared_matrix() -> None:
    """BertForMaskedLM ties its decoder to the word embeddings: candidates built on the decoder's
    names are rewritten to the shared parameter and read as the tied model moves. Unseen word rows
    still produce logits through the tied decoder, so they are not flat there; the head module
    holding the (tied) output bias has no detector and is listed as not covered."""
    torch.manual_seed(0)
    cfg = _config(
        layers=1,
        type_vocab_size=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    mlm = transformers.BertForMaskedLM(cfg).eval()
    word = "model.bert.embeddings.word_embeddings.weight"
    assert mlm.cls.predictions.decoder.weight is mlm.bert.embeddings.word_embeddings.weight
    net = TensorOutput(mlm)

    class _FirstToken(nn.Module):  # categorical family: logits (N, C) at the first position
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)[:, 0]

    x = _tokens()
    reading = read(_FirstToken(), x, Categorical(), progress=False)
    tied = [r for r in reading.directions if "tied" in r.info]
    decoder = "net.model.cls.predictions.decoder"
    # the first position's logits are a row selection of the decoder's: the CE shift is a gauge,
    # tied through the decoder's bias only; every other tied record names the shared matrix
    (shift,) = [r for r in reading.directions if r.detector == "ce-shift"]
    assert shift.layers == (decoder,) and shift.klass == "flat_gauge"
    others = [r for r in tied if r is not shift]
    assert others and all(r.info["tied"][f"{decoder}.weight"] == f"net.{word}" for r in others)
    emb = {r.layers[0]: r for r in reading.directions if r.detector == "embedding-unseen"}
    assert emb["net.model.bert.embeddings.word_embeddings"].klass == "live"
    assert emb["net.model.bert.embeddings.position_embeddings"].klass == "flat_gauge"
    assert [(n.name, n.type, n.n_params) for n in reading.not_covered] == [
        ("net.model.cls.predictions", "BertLMPredictionHead", VOCAB)
    ]


def test_equal_norms_at_initialisation_name_the_last_before_the_head(tmp_path) -> None:
    """At initialisation every LayerNorm has γ = 1, β = 0: the factor test matches all of them on
    a head reading the token mean (no graph edge); the last norm before it is named, all are
    listed. The pooler reads the [CLS] row, a graph edge: the reach test leaves it alone."""
    torch.manual_seed(2)
    cfg = _config(layers=1, type_vocab_size=1, num_labels=3)
    transformers.BertForSequenceClassification(cfg).save_pretrained(str(tmp_path))
    net = load_model(None, architecture=str(tmp_path))
    pooler = net.model.bert.pooler

    class _MeanPooler(nn.Module):  # BERT's pooler on the token mean instead of the [CLS] row
        def __init__(self) -> None:
            super().__init__()
            self.dense, self.activation = pooler.dense, pooler.activation

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            return self.activation(self.dense(hidden.mean(1)))

    reach = [LayerNormReachDetector()]
    assert read(net, _tokens(), Categorical(), progress=False, detectors=reach).directions == ()
    net.model.bert.pooler = _MeanPooler()
    reading = read(net, _tokens(), Categorical(), progress=False, detectors=reach)
    (rec,) = reading.directions
    pre = "model.bert."
    assert rec.layers == (f"{pre}pooler.dense",)  # the head alone moves (s17 trial AD #6)
    assert rec.info["norm"] == f"{pre}encoder.layer.0.output.LayerNorm"
    assert rec.klass == "flat_gauge" and rec.info["closed_form_cos"] >= COS_MIN
    assert rec.info["matching_norms"] == [
        f"{pre}embeddings.LayerNorm",
        f"{pre}encoder.layer.0.attention.output.LayerNorm",
        f"{pre}encoder.layer.0.output.LayerNorm",
    ]


def test_cli_reads_a_hugging_face_directory_without_checkpoint(saved, tmp_path) -> None:
    """``neuromanifold read --model DIR`` (config.json and weights in DIR) reads the saved model,
    the same directions as the Python read of the loaded model."""
    from typer.testing import CliRunner

    from neuromanifold.cli import app

    _, path = saved
    data = tmp_path / "x.pt"
    torch.save(_tokens(), data)
    out = tmp_path / "reading.json"
    args = ["read", "--model", path, "--data", str(data), "--family", "categorical"]
    r = CliRunner().invoke(app, [*args, "--max-directions", "3", "--json", str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    want = read(load_model(None, architecture=path), _tokens(), Categorical(), max_directions=3)
    assert [(d["layers"], d["detector"], d["class"]) for d in got["directions"]] == [
        (list(d.layers), d.detector, d.klass) for d in want.directions
    ]
    bad = tmp_path / "not_a_model"
    bad.mkdir()
    r = CliRunner().invoke(app, ["read", "--model", str(bad), "--data", str(data)])
    assert r.exit_code != 0 and "Hugging Face model directory" in " ".join(r.output.split())


def test_cli_takes_the_categorical_family_from_a_hugging_face_head(saved, tmp_path) -> None:
    """Without ``--family`` a ``*ForSequenceClassification`` directory is read as categorical (its
    logits are softmax logits), the same read as with ``--family categorical``; a base model
    (``AutoModel``, hidden states) implies no family (`neuromanifold.io.family_hint`)."""
    from typer.testing import CliRunner

    from neuromanifold.cli import app
    from neuromanifold.io import family_hint

    _, path = saved
    data = tmp_path / "x.pt"
    torch.save(_tokens(), data)
    outs, printed = [], []
    for extra in ([], ["--family", "categorical"]):
        out = tmp_path / f"r{len(extra)}.json"
        args = ["read", "--model", path, "--data", str(data), "--max-directions", "2"]
        r = CliRunner().invoke(app, [*args, *extra, "--json", str(out)])
        assert r.exit_code == 0, r.output
        outs.append(json.loads(out.read_text()))
        printed.append(" ".join(r.output.split()))
    assert "output family: categorical (the model's own; --family was not given)" in printed[0]
    assert "output family: categorical (--family)" in printed[1]
    assert outs[0]["meta"]["family"] == outs[1]["meta"]["family"] == {"name": "categorical"}
    assert outs[0]["directions"] == outs[1]["directions"]
    transformers = import_transformers()
    base = TensorOutput(transformers.BertModel(_bert().config))
    assert family_hint(load_model(None, architecture=path)) == "categorical"
    assert family_hint(base) is None
