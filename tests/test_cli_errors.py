"""Every command: bad paths and files are one `error: ...` line with exit status 2, no traceback;
``--json PATH`` creates missing parent directories (`neuromanifold.cli._files`)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from neuromanifold.cli import app

RUNNER = CliRunner()
ENV = {"COLUMNS": "200"}

# fast argument lists of every command with --json (the path is appended)
JSON_COMMANDS = {
    "read": ["read", "--model", "zoo:planted-mlp"],
    "cells": ["cells", "--only", "gaussian_location_k1"],
    "lcn ntk": ["lcn", "ntk", "--filters", "2,2", "--theta", "1,2;1,-1"],
    "lcn fiber": ["lcn", "fiber", "--filters", "2,2", "--v", "1,1,-2", "--delta", "0"],
    "lcn compare": [
        "lcn",
        "compare",
        "--filters",
        "2,2",
        "--strides",
        "2",
        "--v",
        "3,6,0,0",
        "--delta",
        "0",
        "--delta",
        "1",
        "--starts",
        "2",
    ],
    "lcn survey": ["lcn", "survey", "--samples", "1", "--rows", "0"],
    "triple nu": ["triple", "nu", "--k", "1-2"],
    "triple rrr": ["triple", "rrr", "3", "2", "3", "1"],
    "triple dln": ["triple", "dln", "--widths", "2,2,2"],
}
# every command with --out DIR
OUT_COMMANDS = {
    "read": ["read", "--model", "zoo:planted-mlp"],
    "cells": ["cells", "--only", "gaussian_location_k1"],
    "lcn survey": ["lcn", "survey", "--samples", "1", "--rows", "0"],
    "lcn converge": ["lcn", "converge", "--seeds", "1"],
    "train": ["train", "vit-digits-scratch", "--steps", "1"],
    "demo": ["demo", "--no-cells"],
}


def _flat(text: str) -> str:
    """Join a message that a CLI error box may have wrapped back into one line."""
    return " ".join(line.strip(" │╭╮╰╯─") for line in text.splitlines())


def assert_usage_error(result, *fragments: str) -> None:
    """Exit status 2 through a clean exit (no exception escaped), each fragment in the output."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    flat = _flat(result.output)
    for fragment in fragments:
        assert fragment in flat, (fragment, result.output)


@pytest.fixture
def triple_reading(tmp_path: Path) -> list[str]:
    """`triple read` arguments on a minimal saved Reading (one node death)."""
    path = tmp_path / "reading.json"
    record = {"class": "genuine_singularity", "k": 2, "layer": "0", "layers": ["0", "2"]}
    path.write_text(json.dumps({"directions": [record]}))
    return ["triple", "read", "--reading", str(path)]


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_json_that_is_a_directory_is_a_usage_error(name: str, tmp_path: Path) -> None:
    target = tmp_path / "out1"
    target.mkdir()
    r = RUNNER.invoke(app, [*JSON_COMMANDS[name], "--json", str(target)], env=ENV)
    assert_usage_error(r, f"error: --json {target}: is a directory; expected a file path")


def test_triple_read_json_directory_and_file_ancestor(tmp_path: Path, triple_reading) -> None:
    r = RUNNER.invoke(app, [*triple_reading, "--json", str(tmp_path)], env=ENV)
    assert_usage_error(r, f"--json {tmp_path}: is a directory")
    afile = tmp_path / "afile"
    afile.write_text("")
    r = RUNNER.invoke(app, [*triple_reading, "--json", str(afile / "x.json")], env=ENV)
    assert_usage_error(r, f"--json {afile / 'x.json'}: {afile} is a file, not a directory")


@pytest.mark.parametrize("name", sorted(OUT_COMMANDS))
def test_out_that_is_a_file_is_a_usage_error(name: str, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    r = RUNNER.invoke(app, [*OUT_COMMANDS[name], "--out", str(afile)], env=ENV)
    assert_usage_error(r, f"error: --out {afile}: is an existing file; --out must be a directory")
    assert afile.read_text() == "keep me"


def test_out_below_a_file_is_a_usage_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    r = RUNNER.invoke(app, [*OUT_COMMANDS["read"], "--out", str(afile / "rep")], env=ENV)
    assert_usage_error(r, f"--out {afile / 'rep'}: {afile} is a file, not a directory")


class _Unwritable:
    """Stands in for ``tempfile.TemporaryDirectory`` where nothing can be created (a read-only
    mount; as root, permission bits do not stop a write, and the probe is what tells)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Read-only file system")


@pytest.mark.parametrize("name", sorted(OUT_COMMANDS))
def test_out_where_nothing_can_be_written_fails_before_the_work(
    name: str, tmp_path: Path, monkeypatch
) -> None:
    """s14 trial N #4: read and train ended in a traceback (train after training), and survey,
    converge and demo failed only after all their work."""
    import neuromanifold.cli._files as files

    monkeypatch.setattr(files.tempfile, "TemporaryDirectory", _Unwritable)
    target = tmp_path / "new" / "rep"
    r = RUNNER.invoke(app, [*OUT_COMMANDS[name], "--out", str(target)], env=ENV)
    assert_usage_error(r, f"error: --out {target}: cannot write under {tmp_path}")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_json_where_nothing_can_be_written_fails_before_the_work(
    name: str, tmp_path: Path, monkeypatch
) -> None:
    import neuromanifold.cli._files as files

    monkeypatch.setattr(files.tempfile, "TemporaryDirectory", _Unwritable)
    target = tmp_path / "r.json"
    r = RUNNER.invoke(app, [*JSON_COMMANDS[name], "--json", str(target)], env=ENV)
    assert_usage_error(r, f"error: --json {target}: cannot write under {tmp_path}")


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc")
def test_out_under_proc_is_refused_at_once() -> None:
    """The trial's own case: nothing can be created in /proc, not even by root."""
    r = RUNNER.invoke(app, [*OUT_COMMANDS["read"], "--out", "/proc/neuromanifold-x"], env=ENV)
    assert_usage_error(r, "error: --out /proc/neuromanifold-x: cannot write under /proc")


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_an_empty_json_path_is_refused(name: str) -> None:
    """Trial N #7: ``--json ""`` was reported as ".: is a directory"."""
    r = RUNNER.invoke(app, [*JSON_COMMANDS[name], "--json", ""], env=ENV)
    assert_usage_error(r, "error: --json: the path is empty; expected a file path")


@pytest.mark.parametrize("name", sorted(OUT_COMMANDS))
def test_an_empty_out_path_is_refused(name: str) -> None:
    """``--out ""`` was parsed by typer as ``Path("")`` = ``.``: the command ran and wrote into
    the current directory (session 14 note)."""
    r = RUNNER.invoke(app, [*OUT_COMMANDS[name], "--out", ""], env=ENV)
    assert_usage_error(r, "error: --out: the path is empty; expected a directory (new or existing)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["demo", "--out", "x", "--cache", ""], "--cache: the path is empty; expected a directory"),
        (["read", "--model", "vit-digits", "--checkpoint", ""], "--checkpoint: the path is empty"),
        (["triple", "read", "--reading", ""], "--reading: the path is empty"),
    ],
)
def test_an_empty_input_path_is_refused(args: list[str], message: str) -> None:
    r = RUNNER.invoke(app, args, env=ENV)
    assert_usage_error(r, "error: " + message)


def test_a_late_write_failure_names_the_path_that_failed(tmp_path: Path) -> None:
    """s15 trial T #5: "--out bad3: cannot write: Is a directory" did not say which file; the
    figure path that is a directory is named now."""
    out = tmp_path / "bad3"
    (out / "survey.png").mkdir(parents=True)
    r = RUNNER.invoke(app, [*OUT_COMMANDS["lcn survey"], "--out", str(out)], env=ENV)
    assert_usage_error(r, f"error: --out {out}: cannot write {out / 'survey.png'}: Is a directory")
    rep = tmp_path / "bad6"  # written atomically: os.replace names the temporary file first
    (rep / "report.json").mkdir(parents=True)
    r = RUNNER.invoke(app, [*OUT_COMMANDS["read"], "--out", str(rep)], env=ENV)
    assert_usage_error(r, f"error: --out {rep}: cannot write {rep / 'report.json'}: Is a directory")


FAST_JSON = ("lcn ntk", "lcn fiber", "lcn compare", "triple nu", "triple rrr", "triple dln")


@pytest.mark.parametrize("name", FAST_JSON)
def test_json_creates_missing_parent_directories(name: str, tmp_path: Path) -> None:
    target = tmp_path / "d5" / "deeper" / "x.json"
    r = RUNNER.invoke(app, [*JSON_COMMANDS[name], "--json", str(target)], env=ENV)
    assert r.exit_code == 0, r.output
    assert isinstance(json.loads(target.read_text()), dict)


def test_json_parents_of_survey_and_triple_read(tmp_path: Path, triple_reading) -> None:
    target = tmp_path / "a" / "b" / "survey.json"
    r = RUNNER.invoke(app, [*JSON_COMMANDS["lcn survey"], "--json", str(target)], env=ENV)
    assert r.exit_code == 0, r.output
    assert json.loads(target.read_text())["rows"]
    target = tmp_path / "c" / "triple.json"
    r = RUNNER.invoke(app, [*triple_reading, "--json", str(target)], env=ENV)
    assert r.exit_code == 0, r.output
    assert json.loads(target.read_text())["lambda"] == "1/2"  # one node death: k = 2, λ = 1/2


def test_read_data_file_problems(tmp_path: Path) -> None:
    base = ["read", "--model", "zoo:planted-mlp", "--data"]
    missing = tmp_path / "missing.pt"
    assert_usage_error(
        RUNNER.invoke(app, [*base, str(missing)], env=ENV), f"--data {missing}: no such file"
    )
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"hello world garbage")
    assert_usage_error(
        RUNNER.invoke(app, [*base, str(garbage)], env=ENV),
        f"--data {garbage}: cannot read it as a torch file",
    )
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    assert_usage_error(
        RUNNER.invoke(app, [*base, str(cut)], env=ENV),
        f"--data {cut}: cannot read safetensors file",
    )
    assert_usage_error(
        RUNNER.invoke(app, [*base, ""], env=ENV),
        "error: --data: the path is empty; expected a torch, safetensors or .npy file",
    )
    assert_usage_error(RUNNER.invoke(app, [*base, "."], env=ENV), "error: --data .: is a directory")
    assert_usage_error(
        RUNNER.invoke(app, [*base, str(tmp_path)], env=ENV),
        f"--data {tmp_path}: is a directory",
    )


def _fake_module(monkeypatch, **attrs) -> str:
    fake = types.ModuleType("_nm_cli_errors_models")
    for k, v in attrs.items():
        setattr(fake, k, v)
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    return fake.__name__


def _tiny_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


def _data_and_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """``x.pt`` (8 probe inputs of the tiny MLP) and ``mlp.pt`` (its state dict)."""
    data, ckpt = tmp_path / "x.pt", tmp_path / "mlp.pt"
    torch.save(torch.randn(8, 4, dtype=torch.float64), data)
    torch.save(_tiny_mlp().state_dict(), ckpt)
    return data, ckpt


def test_read_factory_that_raises(tmp_path: Path, monkeypatch) -> None:
    def boom():
        raise RuntimeError("boom from the factory")

    mod = _fake_module(monkeypatch, boom=boom)
    data, ckpt = _data_and_checkpoint(tmp_path)
    r = RUNNER.invoke(app, ["read", "--model", f"{mod}:boom", "--data", str(data)], env=ENV)
    assert_usage_error(r, f"--model: the factory {mod}:boom raised RuntimeError: boom from the")
    r = RUNNER.invoke(
        app,
        ["read", "--model", f"{mod}:boom", "--checkpoint", str(ckpt), "--data", str(data)],
        env=ENV,
    )
    assert_usage_error(r, f"--model: building {mod}:boom raised RuntimeError: boom from the")


def test_read_module_instance_with_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """io.load_model calls --model with no arguments; a module instance cannot be called so.
    Without --checkpoint the instance is read as it is."""
    mod = _fake_module(monkeypatch, net=_tiny_mlp())
    data, ckpt = _data_and_checkpoint(tmp_path)
    r = RUNNER.invoke(
        app,
        ["read", "--model", f"{mod}:net", "--checkpoint", str(ckpt), "--data", str(data)],
        env=ENV,
    )
    assert_usage_error(r, f"--model: {mod}:net is a module instance; with --checkpoint")
    # without --checkpoint the instance itself is read (it is not called)
    r = RUNNER.invoke(app, ["read", "--model", f"{mod}:net", "--data", str(data)], env=ENV)
    assert r.exit_code == 0, r.output


def test_read_factory_that_needs_arguments(tmp_path: Path) -> None:
    data, ckpt = _data_and_checkpoint(tmp_path)
    msg = "--model: the factory torch.nn:Linear needs arguments (in_features, out_features)"
    for extra in ([], ["--checkpoint", str(ckpt)]):
        r = RUNNER.invoke(
            app, ["read", "--model", "torch.nn:Linear", "--data", str(data), *extra], env=ENV
        )
        assert_usage_error(r, msg)


def test_read_import_error_from_the_model_spec(tmp_path: Path, monkeypatch) -> None:
    """A bare name that is no zoo architecture is read as a timm name: without timm that is an
    ImportError, with timm a ValueError, with a timm whose torchvision does not match torch the
    error timm's import raises; each way one line naming the spec."""
    data, ckpt = _data_and_checkpoint(tmp_path)
    r = RUNNER.invoke(
        app,
        ["read", "--model", "foo-bar", "--checkpoint", str(ckpt), "--data", str(data)],
        env=ENV,
    )
    assert_usage_error(r, "error: ", "foo-bar")
    assert len(r.output.strip().splitlines()) == 1, r.output
    mod = _fake_module(monkeypatch)  # the module exists, the attribute does not
    r = RUNNER.invoke(
        app,
        ["read", "--model", f"{mod}:nope", "--checkpoint", str(ckpt), "--data", str(data)],
        env=ENV,
    )
    assert_usage_error(r, f"cannot import '{mod}:nope'")


class TinyForSequenceClassification(torch.nn.Sequential):
    """Named like a Hugging Face classification head: softmax logits (`io.family_hint`)."""


def test_read_factory_of_a_classification_head_defaults_to_categorical(
    tmp_path: Path, monkeypatch
) -> None:
    """The family hint applies to ``--model module:factory`` too, not only to directories and
    checkpoints (it read such a model as Gaussian)."""
    from neuromanifold.io import TensorOutput

    def build():
        torch.manual_seed(0)
        net = TinyForSequenceClassification(*_tiny_mlp())
        return TensorOutput(net).eval()

    mod = _fake_module(monkeypatch, build=build)
    data = tmp_path / "x.pt"
    torch.save(torch.randn(8, 4), data)
    args = ["read", "--model", f"{mod}:build", "--data", str(data), "--max-directions", "1"]
    r = RUNNER.invoke(app, args, env=ENV)
    assert r.exit_code == 0, r.output
    assert "output family: categorical (the model's own; --family was not given)" in r.output


def test_read_factory_with_dropout_is_read_in_eval_mode(tmp_path: Path, monkeypatch) -> None:
    """User trial J #7: a factory's freshly built module is in training mode; with --checkpoint
    `io.load_model` puts it in eval mode, without it the read refused its Dropout ("call
    model.eval()", which a CLI user cannot do). Both paths now read the same eval-mode model."""

    def drop() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(8, 3)
        )

    mod = _fake_module(monkeypatch, drop=drop)
    data, ckpt = tmp_path / "x.pt", tmp_path / "drop.pt"
    torch.save(torch.randn(16, 4, dtype=torch.float64), data)
    torch.save(drop().state_dict(), ckpt)
    base = ["read", "--model", f"{mod}:drop", "--data", str(data), "--json", "-"]
    readings = []
    for extra in ([], ["--checkpoint", str(ckpt)]):
        r = RUNNER.invoke(app, [*base, *extra], env=ENV)
        assert r.exit_code == 0, r.output
        readings.append(json.loads(r.stdout)["directions"])
    assert readings[0] == readings[1]


def test_read_checkpoint_directory_and_json_data_name_the_problem(tmp_path: Path) -> None:
    """s14 trial N #7: a directory as --checkpoint was called "does not exist"; a JSON file as
    --data printed torch's ten-line advice to reload with weights_only=False."""
    model = ["read", "--model", "vit-digits"]
    r = RUNNER.invoke(app, [*model, "--checkpoint", str(tmp_path)], env=ENV)
    assert_usage_error(r, f"checkpoint {tmp_path} is a directory; expected a .safetensors")
    data = tmp_path / "r.json"
    data.write_text(json.dumps({"a": 1}))
    r = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--data", str(data)], env=ENV)
    assert_usage_error(r, "weights-only unpickling failed: Unsupported operand 123")
    assert "weights_only` set to `False" not in r.output


def test_read_zoo_model_with_a_checkpoint_names_the_architectures(tmp_path: Path) -> None:
    """s14 trial N #7: this said "cannot import module 'zoo'"."""
    sd = tmp_path / "sd.pt"
    torch.save({"w": torch.zeros(2)}, sd)
    r = RUNNER.invoke(app, ["read", "--model", "zoo:planted-mlp", "--checkpoint", str(sd)], env=ENV)
    assert_usage_error(r, "--model zoo:planted-mlp takes no --checkpoint", "'vit-digits'")
    assert "cannot import module" not in r.output
    r = RUNNER.invoke(app, ["read", "--model", "zoo:vit-digits", "--checkpoint", str(sd)], env=ENV)
    assert_usage_error(r, "--model zoo:vit-digits: with --checkpoint name the architecture as")


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="needs /dev/null")
def test_json_to_an_existing_device_is_written_without_a_probe(monkeypatch) -> None:
    """s14 audit Q #3: the write probe ran in the parent of an existing pipe or device
    (``--json >(head)`` failed with "cannot write under /dev/fd"); an existing target is written
    as it is."""
    import neuromanifold.cli._files as files

    monkeypatch.setattr(files.tempfile, "TemporaryDirectory", _Unwritable)
    r = RUNNER.invoke(app, [*JSON_COMMANDS["lcn ntk"], "--json", "/dev/null"], env=ENV)
    assert r.exit_code == 0, r.output


def test_a_file_path_given_to_model_says_how_to_name_the_module(tmp_path: Path) -> None:
    """s22 trial LM #6: ``--model /dir/file.py:factory`` gave a bare "No module named
    '/dir/file'"; the error now names the module spec to pass and where to run from."""
    data, _ = _data_and_checkpoint(tmp_path)
    model_file = tmp_path / "my_models.py"
    model_file.write_text("import torch\n\ndef net():\n    return torch.nn.Linear(4, 2)\n")
    r = RUNNER.invoke(app, ["read", "--model", f"{model_file}:net", "--data", str(data)], env=ENV)
    assert_usage_error(
        r,
        f"cannot import '{model_file}:net'",
        f"set PYTHONPATH={tmp_path}, and pass --model my_models:net",
    )


@pytest.mark.parametrize("name", ["weights.pt", "model.safetensors"])
def test_a_weights_file_given_to_model_says_to_pass_it_as_checkpoint(
    tmp_path: Path, name: str
) -> None:
    """s33 trial USER D5: ``--model deadA.pt`` was refused without saying where the file goes."""
    data, _ = _data_and_checkpoint(tmp_path)
    weights = tmp_path / name
    weights.write_bytes(b"not read")
    r = RUNNER.invoke(app, ["read", "--model", str(weights), "--data", str(data)], env=ENV)
    assert_usage_error(
        r,
        "looks like a weights file: pass it as --checkpoint",
        "--model package.module:factory",
    )


def test_a_model_name_that_is_no_file_gets_no_weights_hint(tmp_path: Path) -> None:
    data, _ = _data_and_checkpoint(tmp_path)
    r = RUNNER.invoke(app, ["read", "--model", "nonsense", "--data", str(data)], env=ENV)
    assert_usage_error(r, "--model must be 'zoo:NAME'")
    assert "weights file" not in r.output


def test_read_factory_that_returns_no_module(tmp_path: Path, monkeypatch) -> None:
    """s30 trial DOCS #3: 'model must be a torch.nn.Module; got int' named neither --model nor
    the factory."""
    mod = _fake_module(
        monkeypatch,
        three=lambda: 3,
        bundle=lambda: types.SimpleNamespace(model="not a module", data=torch.zeros(2, 4)),
    )
    data, ckpt = _data_and_checkpoint(tmp_path)
    r = RUNNER.invoke(app, ["read", "--model", f"{mod}:three", "--data", str(data)], env=ENV)
    assert_usage_error(r, f"--model: {mod}:three gave int, and it is not a torch.nn.Module")
    r = RUNNER.invoke(app, ["read", "--model", f"{mod}:bundle", "--data", str(data)], env=ENV)
    assert_usage_error(r, f"--model: {mod}:bundle gave str, and its .model is not a torch.nn")
    r = RUNNER.invoke(
        app,
        ["read", "--model", f"{mod}:three", "--checkpoint", str(ckpt), "--data", str(data)],
        env=ENV,
    )
    assert_usage_error(r, f"architecture '{mod}:three': factory returned int, expected nn.Module")
