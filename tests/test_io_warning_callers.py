"""The loader's warnings point at the line that called the library (s18 audit AJ #3).

``zoo.load_checkpoint``'s dtype warnings pointed at ``zoo/checkpoint.py`` (one frame short), and
``load_model(<Hugging Face directory>)``'s warning about a broken torchvision pointed into
``io.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from safetensors.torch import save_file

from neuromanifold.io import read_state_dict
from neuromanifold.zoo import CheckpointMeta, load_checkpoint, save_checkpoint
from neuromanifold.zoo.models import ZOO_ARCHITECTURES, build_model

# the torchvision of s18 audit AJ #4: installed, but its import raises a RuntimeError
BROKEN_TORCHVISION = 'raise RuntimeError("operator torchvision::nms does not exist")\n'


def test_zoo_load_checkpoint_warnings_name_the_caller(tmp_path: Path) -> None:
    cfg = ZOO_ARCHITECTURES["mlp-digits"]
    path = save_checkpoint(
        tmp_path / "mlp.safetensors", build_model(cfg), CheckpointMeta(architecture=cfg.to_dict())
    )
    save_file({k: v.double() for k, v in read_state_dict(path).items()}, str(path))  # float64
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_checkpoint(path)
    said = [w for w in caught if "converted to float64" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert said[0].filename == __file__, (said[0].filename, said[0].lineno)


@pytest.fixture(scope="module")
def broken_torchvision_env(tmp_path_factory) -> tuple[dict[str, str], Path]:
    """An environment whose ``torchvision`` is installed but raises on import (a package on
    ``PYTHONPATH``), and a tiny Hugging Face BERT directory."""
    from neuromanifold.io import import_transformers

    try:
        transformers = import_transformers()
    except ImportError:
        pytest.skip("transformers is not installed")
    root = tmp_path_factory.mktemp("broken_torchvision")
    (root / "torchvision").mkdir()
    (root / "torchvision" / "__init__.py").write_text(BROKEN_TORCHVISION)
    cfg = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=12,
                                  architectures=["BertForSequenceClassification"])  # fmt: skip
    transformers.BertForSequenceClassification(cfg).save_pretrained(str(root / "bert"))
    paths = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    return env, root


@pytest.mark.parametrize(
    "call",
    ["load_model(None, architecture=sys.argv[1])", "import_transformers()"],
)
def test_torchvision_warning_names_the_caller(broken_torchvision_env, call: str) -> None:
    """In a fresh process (the warning is said once, before transformers is first imported)."""
    env, root = broken_torchvision_env
    script = root / f"caller_{len(call)}.py"
    script.write_text(
        "import json, sys, warnings\n"
        "from neuromanifold.io import import_transformers, load_model\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    {call}\n"
        "print(json.dumps([[w.category.__name__, w.filename, str(w.message)] for w in caught\n"
        "                  if 'torchvision is installed' in str(w.message)]))\n"
    )
    r = subprocess.run(
        [sys.executable, str(script), str(root / "bert")],
        capture_output=True, text=True, env=env, cwd=root, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    ((category, filename, message),) = json.loads(r.stdout.splitlines()[-1])
    assert category == "BrokenTorchvisionWarning" and "torchvision::nms" in message, message
    assert filename == str(script)


def test_read_says_the_hidden_torchvision_as_one_note(broken_torchvision_env) -> None:
    """s18 audit AJ #4: the read CLI printed the library's RuntimeWarning in Python's format
    (``.../neuromanifold/io.py:516: RuntimeWarning: ...`` and a line of the library's source)."""
    import torch

    env, root = broken_torchvision_env
    ids = root / "ids.pt"
    torch.save(torch.randint(0, 40, (4, 6)), ids)  # token ids below the tiny BERT's vocab_size
    args = ["read", "--model", str(root / "bert"), "--data", str(ids), "--max-directions", "0"]
    r = subprocess.run(
        [sys.executable, "-m", "neuromanifold", *args, "--json", "-"],
        capture_output=True, text=True, env={**env, "COLUMNS": "200"}, cwd=root, timeout=300,
        check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["directions"] == []  # stdout: the JSON only
    notes = [line for line in r.stderr.splitlines() if "torchvision" in line]
    assert notes == [
        "note: torchvision is installed but cannot be imported (RuntimeError: operator "
        "torchvision::nms does not exist); it is hidden from transformers so that models load "
        "without it"
    ], r.stderr
    assert "RuntimeWarning" not in r.stderr and "io.py" not in r.stderr, r.stderr
