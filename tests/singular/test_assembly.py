"""Assembly of (λ, m) from typed loci equals the closed forms on every enumerable cell."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from neuromanifold.singular.assembly import (
    SINGLE_LOCUS_ASSUMPTION,
    Assembly,
    Locus,
    assemble,
    assemble_from_reading,
    loci_from_reading,
)
from neuromanifold.singular.closed_forms import (
    additive,
    deep_linear,
    normal_crossing,
    one_hidden_node,
    rrr,
    width_one_chain,
)
from neuromanifold.singular.nu import nu

MAX_SHAPE = 6


def rrr_planted_loci(M: int, H: int, N: int, r: int) -> list[Locus]:
    """Enumerated loci of y = BAx at a true parameter of rank r with H ∈ {r, r + 1}.

    Live part: r(M+N−r) regular directions (the rank-r matrices near W₀) and the GL(r) gauge
    (r² dims). One dead hidden unit (H = r + 1) with input weights a ∈ R^M and output weights
    b ∈ R^N: the live part absorbs the components of b aᵀ in the tangent space of the rank-r
    variety, leaving K ≍ ‖P⊥a‖² ‖P⊥b‖², a crossing of two order-1 components of dimensions
    M − r and N − r; if either is 0 the dead unit is flat (a gauge-like direction).
    """
    loci = [Locus("live", "regular", dim=r * (M + N - r)), Locus("GL(r)", "gauge", dim=r * r)]
    if H == r + 1:
        if min(M - r, N - r) >= 1:
            loci.append(
                Locus("dead unit", "genuine", orders=(1, 1), dims=(M - r, N - r), block="dead")
            )
        else:
            loci.append(Locus("dead unit (absorbed)", "gauge", dim=M + N))
    return loci


def dead_path_loci(widths: list[int], r: int) -> list[Locus]:
    """Deep linear chain, hidden widths r + 1, true rank r: one dead path through all layers.

    Components: layer 1's dead input weights (dim M − r), the L − 2 scalar weights between the
    dead hidden units, layer L's dead output weights (dim N − r), all of order 1.
    """
    M, N, L = widths[0], widths[-1], len(widths) - 1
    dims = (M - r, *([1] * (L - 2)), N - r)
    loci = [Locus("live", "regular", dim=r * (M + N - r))]
    if min(dims) >= 1:
        loci.append(Locus("dead path", "genuine", orders=(1,) * L, dims=dims, block="path"))
    return loci


@pytest.mark.parametrize("activation", ["relu", "gelu", "tanh", "silu", "relu2"])
def test_node_death(activation: str) -> None:
    p = 2 if activation == "relu2" else 1
    loci = [
        Locus("a = 0", "genuine", orders=(1,), block="unit"),
        Locus("b = 0", "genuine", orders=(p,), block="unit"),
    ]
    a, cf = assemble(loci), one_hidden_node(activation)
    assert (a.lam, a.m) == (cf.lam, cf.m)
    # spec §5: the diagonal of the crossing {a = 0} ∩ {b = 0} has order 1 + p, and ν is ν(1 + p)
    assert a.dominant_order == 1 + p and a.nu_universal == nu(1 + p)
    assert a.dominant_block == "unit" and a.blocks[0].diagonal_order == 1 + p


@pytest.mark.parametrize("depth", [2, 3, 4, 5, 6])
def test_width_one_chain(depth: int) -> None:
    loci = [Locus(f"w{i}", "genuine", orders=(1,), block="chain") for i in range(depth)]
    a = assemble(loci)
    assert (a.lam, a.m) == (width_one_chain(depth).lam, width_one_chain(depth).m)
    assert a.dominant_order == depth and a.nu_universal == nu(depth)
    cf = deep_linear([1] * (depth + 1), 0)
    assert (a.lam, a.m) == (cf.lam, cf.m)


def test_rrr_at_planted_rank_all_shapes() -> None:
    checked = 0
    for M in range(1, MAX_SHAPE + 1):
        for N in range(1, MAX_SHAPE + 1):
            for r in range(min(M, N) + 1):
                for H in (r, r + 1):
                    if H < 1:
                        continue
                    a, cf = assemble(rrr_planted_loci(M, H, N, r)), rrr(M, H, N, r)
                    assert (a.lam, a.m) == (cf.lam, cf.m), (M, H, N, r)
                    checked += 1
    assert checked > 150


def test_rrr_two_dead_units_is_not_enumerable() -> None:
    # H − r = 2: the two dead units mix under GL(2) (a determinantal variety). Treating them as
    # independent crossings overestimates λ: this is the stated limit of the assembly.
    naive = assemble(
        [Locus(f"dead{j}", "genuine", orders=(1, 1), dims=(5, 5), block=f"u{j}") for j in (0, 1)]
    )
    assert naive.lam == Fraction(5) and rrr(5, 2, 5, 0).lam == Fraction(9, 2)


def test_deep_linear_dead_path_lambda_all_shapes() -> None:
    for L in (2, 3, 4):
        for M in range(1, 6):
            for N in range(1, 6):
                for r in range(min(M, N) + 1):
                    widths = [M, *([r + 1] * (L - 1)), N]
                    a, cf = assemble(dead_path_loci(widths, r)), deep_linear(widths, r)
                    assert a.lam == cf.lam, (widths, r)
                    if L == 2 or r == 0:  # r = 0: hidden widths 1, m derived (width_one_hidden)
                        assert a.m == cf.m, (widths, r)


def test_rules_additive_crossing_regular_gauge() -> None:
    # Independent blocks add: x^4 + y^6 + 2 regular squares.
    loci = [
        Locus("x", "genuine", orders=(2,), block="x"),
        Locus("y", "genuine", orders=(3,), block="y"),
        Locus("reg", "regular", dim=2),
        Locus("shift", "gauge", dim=1),
    ]
    a = assemble(loci)
    assert (a.lam, a.m) == (additive([2, 3], regular_dims=2).lam, 1)
    # dominant block: the smallest λ_block (y: 1/6 < x: 1/4), diagonal order 3
    assert a.regular_dims == 2 and a.gauge == ("shift",) and a.dominant_order == 3
    assert a.dominant_block == "y" and a.nu_universal == nu(3)
    # Crossing: components in one block; two crossings of multiplicity 2 and 3 add.
    b = assemble(
        [
            Locus("c1", "genuine", orders=(1, 1), block="c1"),
            Locus("c2", "genuine", orders=(2, 2, 1), block="c2"),
        ]
    )
    assert b.lam == normal_crossing([1, 1]).lam + normal_crossing([2, 2, 1]).lam
    assert b.m == 1 + (2 - 1) + (2 - 1)
    # c2 (λ = 1/4) dominates c1 (λ = 1/2); its diagonal order is 2 + 2 + 1
    assert b.dominant_block == "c2" and b.dominant_order == 5 and b.nu_universal == nu(5)
    empty = assemble([])
    assert (empty.lam, empty.m, empty.dominant_order, empty.nu_universal) == (0, 1, 1, 0.5)
    assert empty.dominant_block is None


def test_dominant_block_with_component_dims() -> None:
    # (k, d) = (2, 3), (1, 1): slices 3/4 and 1/2, λ = 1/2 from the order-1 component; the
    # dominant order is the diagonal order 2 + 1 = 3, not the largest component order.
    a = assemble([Locus("x", "genuine", orders=(2, 1), dims=(3, 1), block="u")])
    assert (a.lam, a.m) == (Fraction(1, 2), 1)
    assert a.dominant_order == 3 and a.nu_universal == nu(3)
    # A wide block with a large order loses to a scalar block with a smaller λ.
    wide = Locus("wide", "genuine", orders=(4, 1), dims=(6, 5), block="wide")  # λ = 3/4
    node = Locus("node", "genuine", orders=(1, 1), block="node")  # λ = 1/2, k_diag = 2
    a = assemble([wide, node])
    assert a.lam == Fraction(3, 4) + Fraction(1, 2) and a.m == 1 + 0 + 1
    assert a.dominant_block == "node" and a.dominant_order == 2 and a.nu_universal == nu(2)


def test_dominant_block_ties_take_the_largest_diagonal_order() -> None:
    # λ_block = 1/2 for both; the width-one chain of depth 3 has the larger diagonal order.
    loci = [
        Locus("node", "genuine", orders=(1, 1), block="node"),
        Locus("chain", "genuine", orders=(1, 1, 1), block="chain"),
        Locus("reg", "regular", dim=3),
    ]
    a = assemble(loci)
    assert a.lam == Fraction(1, 2) + Fraction(1, 2) + Fraction(3, 2)
    assert a.dominant_block == "chain" and a.dominant_order == 3 and a.nu_universal == nu(3)
    # equal λ and equal diagonal order: the first listed block
    twins = assemble([Locus(f"n{j}", "genuine", orders=(1, 1), block=f"n{j}") for j in (0, 1)])
    assert twins.dominant_block == "n0" and twins.dominant_order == 2


def test_nu_not_computed_beyond_k_max() -> None:
    from neuromanifold.singular.nu import K_MAX

    a = assemble([Locus("deep", "genuine", orders=(1,) * (K_MAX + 1), block="chain")])
    assert a.dominant_order == K_MAX + 1 and a.nu_universal is None
    assert any(f"> K_MAX = {K_MAX}" in n for n in a.notes)
    assert a.to_dict()["nu_universal"] is None


def test_result_fields_and_json() -> None:
    a = assemble([Locus("a", "genuine", orders=(1, 2), block="u")])
    assert isinstance(a, Assembly) and a.assumption == SINGLE_LOCUS_ASSUMPTION
    d = a.to_dict()
    assert d["lambda"] == "1/4" and d["lambda_float"] == 0.25 and d["m"] == 1
    assert d["blocks"][0]["orders"] == [1, 2] and "single-locus" in d["assumption"]
    assert d["blocks"][0]["diagonal_order"] == 3 and d["dominant_order"] == 3
    assert d["dominant_block"] == "u" and d["nu_universal"] == nu(3)
    loc = Locus("a", "genuine", orders=(1, 2), dims=(3, 1), block="u")
    assert Locus.from_dict(loc.to_dict()) == loc


def test_errors() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        Locus("x", "dead")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="orders must be a non-empty tuple"):
        Locus("x", "genuine")
    with pytest.raises(ValueError, match="orders must be ints >= 1"):
        Locus("x", "genuine", orders=(0,))
    with pytest.raises(ValueError, match="dims must match orders"):
        Locus("x", "genuine", orders=(1, 2), dims=(1,))
    with pytest.raises(ValueError, match="orders must be empty for a regular locus"):
        Locus("x", "regular", orders=(2,))
    with pytest.raises(ValueError, match=r"dims must be empty for a gauge locus, got \(2,\)"):
        Locus("x", "gauge", dims=(2,))  # s34 trial TRIPLE O5: dropped without a word
    with pytest.raises(ValueError, match="dim must be an int >= 0"):
        Locus("x", "regular", dim=-1)
    with pytest.raises(TypeError, match=r"loci\[0\] must be a Locus"):
        assemble([("x", "genuine")])  # type: ignore[list-item]


# --- assembly from a read -------------------------------------------------------------------


def _rec(klass: str, k: int | None, layers: tuple[str, ...], **extra) -> dict:
    return {"class": klass, "k": k, "layer": layers[0], "layers": list(layers), **extra}


def test_loci_from_stand_in_records() -> None:
    records = [
        _rec("genuine_singularity", 2, ("0", "2")),  # node death, σ'(0) ≠ 0: (1, 1)
        _rec("genuine_singularity", 3, ("4", "6")),  # squared-ReLU node death: (2, 1) for (b, a)
        _rec("genuine_singularity", 3, ("a", "b", "c")),  # depth-3 chain: (1, 1, 1)
        _rec("live", 1, ("0",)),
        _rec("flat_gauge", None, ("5",)),
        _rec("curved_gauge", 2, ("5",)),
        _rec("genuine_singularity", None, ("9",)),
    ]
    loci, notes = loci_from_reading({"directions": records})
    genuine = [loc for loc in loci if loc.kind == "genuine"]
    assert [loc.orders for loc in genuine] == [(1, 1), (2, 1), (1, 1, 1)]  # input side first
    assert len({loc.block for loc in genuine}) == 3
    assert [loc.kind for loc in loci].count("gauge") == 2 and len(notes) == 2
    assert "no component_dims were given" in notes[1]  # the three crossings are at dims 1
    expected = (
        normal_crossing([1, 1]).lam + normal_crossing([2, 1]).lam + normal_crossing([1, 1, 1]).lam
    )
    a = assemble_from_reading(records)  # the live record counts 1/2
    assert a.lam == expected + Fraction(1, 2)
    assert a.m == 1 + (2 - 1) + 0 + (3 - 1)
    # dominant: the squared-ReLU death (λ = 1/4), read order 3 = its diagonal order 1 + 2
    assert a.dominant_order == 3 and a.nu_universal == nu(3) and "skipped" in a.notes[0]
    assert [blk.diagonal_order for blk in a.blocks] == [2, 3, 3]  # the read orders k
    b = assemble_from_reading(records, regular_dims=4)  # the caller's count replaces it
    assert b.lam == expected + Fraction(4, 2) and any("live direction" in n for n in b.notes)
    with pytest.raises(ValueError, match="regular_dims must be an int >= 0 or None"):
        assemble_from_reading(records, regular_dims=-1)


def test_assembly_of_a_truncated_reading_says_what_it_left_out() -> None:
    records = [_rec("genuine_singularity", 2, ("0", "2")), _rec("live", 1, ("0",))]
    full = {"directions": records, "meta": {"n_candidates": 2, "n_read": 2}}
    part = {"directions": records[:1], "meta": {"n_candidates": 2, "n_read": 1}}
    assert not any("candidate directions" in n for n in assemble_from_reading(full).notes)
    notes = assemble_from_reading(part).notes
    assert notes[0] == (
        "the reading read 1 of the 2 candidate directions it detected (max_directions): the "
        "unread ones are not in this assembly"
    )


CAP_NOTE = "so m and λ are lower bounds"


def test_assembly_notes_a_detector_cap_that_cut_dead_directions() -> None:
    # trial B #6: the cap cut dead chains (meta["truncated"], records' info["truncated"]) and
    # the assembly said nothing; cuts of gauge generators or live modes change neither λ nor m
    cut = {"cap": 4, "found": 6, "kept": 4}
    chains = [_rec("genuine_singularity", 2, ("0", "2"), detector="duality") for _ in range(4)]
    meta = {"truncated": [{"layers": ["0", "2"], "detector": "duality", **cut}]}
    notes = assemble_from_reading({"directions": chains, "meta": meta}).notes
    cap_notes = tuple(n for n in notes if CAP_NOTE in n)  # beside the same-layers note
    assert cap_notes == (
        f"duality on 0+2 found 6 directions and kept 4 (cap 4): the cut ones are not in this "
        f"assembly, {CAP_NOTE}",
    )
    # the same from the records alone (an iterable of records has no meta)
    marked = [{**r, "info": {"truncated": cut}} for r in chains]
    assert assemble_from_reading(marked).notes == notes
    # a one-sided kind whose kept record is genuine counts; gauge and live kinds do not
    joint = _rec("genuine_singularity", 2, ("5",), detector="kfac-joint", info={"truncated": cut})
    assert [CAP_NOTE in n for n in assemble_from_reading([joint]).notes] == [True]
    others = [
        _rec("curved_gauge", 2, ("0", "2"), detector="relu-rescale", info={"truncated": cut}),
        _rec("live", 1, ("0",), detector="kfac-G", info={"truncated": cut}),
        _rec("flat_gauge", None, ("0",), detector="kfac-A", info={"truncated": cut}),
    ]
    assert not any(CAP_NOTE in n for n in assemble_from_reading(others).notes)


def test_capped_whole_model_read_assembles_lower_bounds_of_the_full_read() -> None:
    import torch
    from torch import nn

    from neuromanifold.singular.detectors import DetectorRegistry, LinearDetector
    from neuromanifold.singular.detectors import default_registry as registry
    from neuromanifold.singular.family import Gaussian
    from neuromanifold.singular.read import read

    n_dead = 6  # more node deaths than LinearDetector's default chain cap (4)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, 2)).double().eval()
    with torch.no_grad():
        for j in range(n_dead):
            m[0].weight[j] = 0.0
            m[0].bias[j] = 0.0
            m[2].weight[:, j] = 0.0
    x = torch.randn(48, 4, dtype=torch.float64)
    capped = assemble_from_reading(read(m, x, Gaussian(), progress=False))
    raised = DetectorRegistry(
        [LinearDetector(max_chains=8) if isinstance(d, LinearDetector) else d for d in registry()]
    )
    full = assemble_from_reading(read(m, x, Gaussian(), detectors=raised, progress=False))
    assert len(full.blocks) == n_dead > len(capped.blocks)
    assert any(f"found {n_dead} directions" in n and CAP_NOTE in n for n in capped.notes)
    assert not any(CAP_NOTE in n for n in full.notes)
    # the stated bounds hold: every cut node death adds λ_block = 1/2 and m_block − 1 = 1
    cut = n_dead - len(capped.blocks)
    assert full.lam == capped.lam + Fraction(cut, 2) and full.m == capped.m + cut


def test_component_dims_give_rrr_single_dead_unit() -> None:
    # RRR (M, H, N, r) = (5, 3, 4, 2): one dead unit, components of dims (M − r, N − r) = (3, 2).
    rec = [_rec("genuine_singularity", 2, ("0", "1"))]
    a = assemble_from_reading(rec, regular_dims=2 * (5 + 4 - 2), component_dims={0: (3, 2)})
    assert (a.lam, a.m) == (rrr(5, 3, 4, 2).lam, rrr(5, 3, 4, 2).m)
    assert a.dominant_order == 2 and a.nu_universal == nu(2)  # the read order, not max k_i = 1
    with pytest.raises(ValueError, match=r"component_dims\[0\] must have 2 entries"):
        assemble_from_reading(rec, component_dims={0: (3,)})
    with pytest.raises(TypeError, match="reading must be a Reading"):
        assemble_from_reading(42)


@pytest.mark.parametrize("key", ["0", 7, -1, True, 1])
def test_component_dims_keys_must_name_a_genuine_record(key: object) -> None:
    """User trial H #1: a key naming no genuine record (a JSON string key, out of range,
    negative, a bool, a live record's index) was ignored, so the record kept dimension 1 and
    λ = 15/2, m = 2 came back where the caller's dims give the closed form 8, m = 1."""
    recs = [_rec("genuine_singularity", 2, ("0", "1")), _rec("live", 1, ("0",))]
    with pytest.raises(ValueError, match=r"component_dims key .*: expected the int index of a "):
        assemble_from_reading(recs, regular_dims=14, component_dims={key: (3, 2)})
    if key == "0":
        with pytest.raises(ValueError, match=r"convert them with int\(\)"):
            assemble_from_reading(recs, regular_dims=14, component_dims={key: (3, 2)})


def test_component_dims_accept_numpy_integer_keys() -> None:
    """Audit S12b #1: keys from np.flatnonzero / np.where are NumPy integers; they name record 0
    as well as 0 does (RRR (5, 3, 4, 2): λ = 8, m = 1)."""
    import numpy as np

    recs = [_rec("genuine_singularity", 2, ("0", "1")), _rec("live", 1, ("0",))]
    (key,) = np.flatnonzero([True, False])
    a = assemble_from_reading(recs, regular_dims=14, component_dims={key: (3, 2)})
    assert (a.lam, a.m) == (rrr(5, 3, 4, 2).lam, rrr(5, 3, 4, 2).m)


@pytest.mark.parametrize(
    "name",
    [
        "node_death_relu",
        "node_death_gelu",
        "node_death_tanh",
        "node_death_silu",
        "node_death_relu2",
        "scalar_chain_L2",
        "scalar_chain_L3",
        "scalar_chain_L4",
    ],
)
def test_assembly_from_real_direction_read_equals_closed_form(name: str) -> None:
    from neuromanifold.cells.registry import get_cell
    from neuromanifold.singular.direction import read_direction

    cell = get_cell(name)
    r = read_direction(cell.model, cell.params, cell.direction, cell.data, cell.family)
    a = assemble_from_reading([r])
    if name.startswith("node_death"):
        cf = one_hidden_node(name.removeprefix("node_death_"))
        k_diag = 3 if name.endswith("relu2") else 2  # 1 + p
    else:
        k_diag = int(name.removeprefix("scalar_chain_L"))
        cf = width_one_chain(k_diag)
    assert (a.lam, a.m) == (cf.lam, cf.m), (r.k, r.klass)
    assert a.dominant_order == k_diag == r.k and a.nu_universal == nu(k_diag)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_assembly_from_whole_model_read_equals_deep_linear_closed_form(depth: int) -> None:
    from neuromanifold.cells.planted import planted_deep_linear
    from neuromanifold.singular.read import read

    width = 4
    net = planted_deep_linear(depth=depth, width=width)
    reading = read(net.model, net.data, net.family, progress=False)
    r = width - 1  # the dead path lowers the end-to-end rank by one
    a = assemble_from_reading(reading.to_dict(), regular_dims=r * (2 * width - r))
    cf = deep_linear([width] * (depth + 1), r)
    assert a.lam == cf.lam
    assert a.m == depth  # the dead path is a crossing of `depth` order-1 components
    assert a.dominant_order == depth and a.nu_universal == nu(depth)  # read along the diagonal
    if depth == 2:
        assert a.m == cf.m


def test_read_and_assembly_are_deterministic() -> None:
    from neuromanifold.cells.planted import planted_deep_linear
    from neuromanifold.singular.read import read

    net = planted_deep_linear(depth=2, width=4)
    runs = [read(net.model, net.data, net.family, progress=False) for _ in range(2)]
    assert runs[0].to_dict() == runs[1].to_dict()
    assert assemble_from_reading(runs[0]).to_dict() == assemble_from_reading(runs[1]).to_dict()


@pytest.mark.parametrize("activation", ["relu", "gelu", "relu2"])
def test_assembly_from_whole_model_read_of_node_death_equals_closed_form(activation: str) -> None:
    from neuromanifold.cells.registry import get_cell
    from neuromanifold.singular.read import read

    cell = get_cell(f"node_death_{activation}")
    reading = read(cell.model, cell.data, cell.family, progress=False)
    a, cf = assemble_from_reading(reading), one_hidden_node(activation)
    assert (a.lam, a.m) == (cf.lam, cf.m)
    k_diag = 3 if activation == "relu2" else 2
    assert a.dominant_order == k_diag and a.nu_universal == nu(k_diag)


@pytest.mark.parametrize("k", [2.0, "2", 0, -1, True])
def test_a_malformed_order_is_an_error_not_a_skip(k) -> None:
    """s15 trial T #3: a genuine record with k = 2.0 was skipped with a note, and (λ, m) fell
    from (15/2, 2) to (7, 1) without an error; the CLI refused the same file."""
    rec = {"class": "genuine_singularity", "k": k, "layers": ["0", "1"]}
    with pytest.raises(ValueError, match=r"directions\[1\] has order k = .*expected an integer"):
        assemble_from_reading([{"class": "live", "k": 1}, rec], regular_dims=14)


def test_unknown_class_is_an_error_and_orders_may_be_numpy_ints() -> None:
    with pytest.raises(ValueError, match=r"directions\[0\] has class 'genuine'; expected one of"):
        loci_from_reading([{"class": "genuine", "k": 2}])
    rec = {"class": "genuine_singularity", "k": np.int64(2), "layers": ["0", "1"]}
    a = assemble_from_reading([rec], regular_dims=14)
    assert (a.lam, a.m) == (Fraction(15, 2), 2)  # one (1, 1) crossing (λ 1/2, m 2) + 14 · 1/2


def test_record_classes_are_the_direction_classes() -> None:
    from neuromanifold.singular.assembly import _CLASSES
    from neuromanifold.singular.classify import DirectionClass

    assert {c.value for c in DirectionClass} == _CLASSES


def test_loci_without_a_block_are_independent() -> None:
    """s16 trial X #3: the default block "" made every locus built without one a component of a
    single crossing: two independent t⁴ loci gave (λ, m) = (1/4, 2) instead of 1/4 + 1/4 = 1/2
    (spec §5 rule 1: independent coordinates add), m = 1."""
    a = assemble([Locus("x", "genuine", orders=(2,)), Locus("y", "genuine", orders=(2,))])
    assert (a.lam, a.m) == (Fraction(1, 2), 1)
    assert Locus("x", "genuine", orders=(1,)).group == "x"
    # resolved at assembly: renaming a copy moves it to its own block (s16 audit BB #6)
    base = Locus("x", "genuine", orders=(2,))
    three = [dataclasses.replace(base, name=n) for n in "xyz"]
    assert (assemble(three).lam, assemble(three).m) == (Fraction(3, 4), 1)
    shared = [Locus(n, "genuine", orders=(2,), block="b") for n in "xy"]
    assert (assemble(shared).lam, assemble(shared).m) == (Fraction(1, 4), 2)  # rule 2: crossing
    loc = Locus("x", "genuine", orders=(2,))
    assert Locus.from_dict(loc.to_dict()) == loc


def test_block_must_be_a_string() -> None:
    """An int block was accepted and 0 ≠ "0" split one crossing in two."""
    with pytest.raises(ValueError, match=r"block must be a str .* got 0 \(locus 'x'\)"):
        Locus("x", "genuine", orders=(2,), block=0)
