"""Device errors fit for the Python API and the CLI; meta-device models (s17 trial AF #7).

A model built under ``torch.device("meta")`` or accelerate's ``init_empty_weights`` has shapes but
no values: `read`, `read_direction` and `directional_fisher` refuse it up front with one
``ValueError`` instead of torch's "Tensor.item() cannot be called on meta tensors" from deep inside
the read. CUDA's absence is faked (``torch.cuda.is_available`` patched), so the message tests run
with or without a GPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.distributed import resolve_device
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.fisher import directional_fisher
from neuromanifold.singular.read import read

META_MATCH = r"parameters '0\.weight', '0\.bias', '2\.weight', … \(4 in all\) are on the meta"
LOAD_MATCH = r"load the weights first"
NO_CUDA_MATCH = r"CUDA is not available.*device='cpu'.*--device cpu on the command line"


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).double().eval()


def _data() -> Tensor:
    torch.manual_seed(1)
    return torch.randn(24, 4, dtype=torch.float64)


def _direction() -> dict[str, Tensor]:
    torch.manual_seed(2)
    return {"0.weight": torch.randn(5, 4, dtype=torch.float64)}


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.usefixtures("no_cuda")
def test_cuda_unavailable_names_the_api_argument_and_the_cli_flag() -> None:
    with pytest.raises(ValueError, match=NO_CUDA_MATCH):
        resolve_device("cuda")
    with pytest.raises(ValueError, match=NO_CUDA_MATCH):
        read(_net(), _data(), Categorical(), device="cuda", progress=False)


@pytest.mark.usefixtures("no_cuda")
def test_cli_cuda_unavailable_is_one_line_and_exit_2() -> None:
    from typer.testing import CliRunner

    from neuromanifold.cli import app

    res = CliRunner().invoke(app, ["read", "--model", "zoo:planted-mlp", "--device", "cuda"])
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2
    assert len(lines) == 1 and lines[0].startswith("error: device 'cuda' requested")
    assert "--device cpu" in lines[0]


def _meta_net() -> nn.Module:
    return _net().to("meta")


def test_read_refuses_a_meta_model() -> None:
    with pytest.raises(ValueError, match=rf"{META_MATCH}.*{LOAD_MATCH}"):
        read(_meta_net(), _data(), Categorical(), progress=False)


def test_read_refuses_a_model_built_under_the_meta_device() -> None:
    with torch.device("meta"):
        net = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).double().eval()
    with pytest.raises(ValueError, match=rf"{META_MATCH}.*{LOAD_MATCH}"):
        read(net, _data(), Categorical(), progress=False)


def test_read_direction_and_directional_fisher_refuse_a_meta_model() -> None:
    with pytest.raises(ValueError, match=rf"{META_MATCH}.*{LOAD_MATCH}"):
        directional_fisher(_meta_net(), {}, _direction(), _data(), Categorical())
    with pytest.raises(ValueError, match=rf"{META_MATCH}.*{LOAD_MATCH}"):
        read_direction(_meta_net(), {}, _direction(), _data(), Categorical())


def test_meta_buffers_are_refused() -> None:
    net = _net()
    net.register_buffer("scale", torch.empty(3, device="meta"))
    with pytest.raises(ValueError, match=r"buffers 'scale' are on the meta device"):
        read(net, _data(), Categorical(), progress=False)
    with pytest.raises(ValueError, match=r"buffers 'scale' are on the meta device"):
        directional_fisher(net, {}, _direction(), _data(), Categorical())


def test_meta_values_in_params_are_refused() -> None:
    meta = {"0.weight": torch.empty(5, 4, dtype=torch.float64, device="meta")}
    with pytest.raises(ValueError, match=r"params\['0\.weight'\] is on the meta device"):
        directional_fisher(_net(), meta, _direction(), _data(), Categorical())


def test_a_meta_model_with_every_parameter_supplied_is_read() -> None:
    """The caller's ``params`` replace the model's own tensors, so a meta model whose every
    parameter is supplied holds nothing that the read would take from it: it is read, and equals
    the read of the same values in a materialised model (the same float64 computation on the same
    values, hence bitwise equal on CPU)."""
    net = _net()
    values = {k: v.detach().clone() for k, v in net.named_parameters()}
    on_meta = directional_fisher(_meta_net(), values, _direction(), _data(), Categorical())
    real = directional_fisher(net, {}, _direction(), _data(), Categorical())
    assert torch.equal(on_meta, real)
    partial = {k: v for k, v in values.items() if k != "2.bias"}
    with pytest.raises(ValueError, match=r"parameters '2\.bias' are on the meta device"):
        directional_fisher(_meta_net(), partial, _direction(), _data(), Categorical())
