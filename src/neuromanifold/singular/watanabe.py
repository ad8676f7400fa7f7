"""Watanabe's triple (λ, m, ν) in one place: λ_dir and ν(k), closed forms, assembly.

A façade over :mod:`~neuromanifold.singular.nu` (λ_dir = 1/(2k), ν(k) by quadrature),
:mod:`~neuromanifold.singular.closed_forms` (exact (λ, m) ground truths) and
:mod:`~neuromanifold.singular.assembly` (global (λ, m) from typed loci or from a Reading).

>>> from fractions import Fraction
>>> rrr(5, 3, 5, 0).lam == Fraction(13, 2) and nu(1) == 0.5
True
"""

from __future__ import annotations

from neuromanifold.singular.assembly import (
    SINGLE_LOCUS_ASSUMPTION,
    Assembly,
    BlockTriple,
    Locus,
    assemble,
    assemble_from_reading,
    loci_from_reading,
)
from neuromanifold.singular.closed_forms import (
    ClosedForm,
    additive,
    deep_linear,
    normal_crossing,
    normal_form,
    one_hidden_node,
    regular,
    rrr,
    width_one_chain,
)
from neuromanifold.singular.nu import (
    lambda_dir,
    lambda_dir_exact,
    nu,
    nu_quadrature,
    posterior_moments,
    riccati_v,
    v_frozen_zero,
)

__all__ = [
    "SINGLE_LOCUS_ASSUMPTION",
    "Assembly",
    "BlockTriple",
    "ClosedForm",
    "Locus",
    "additive",
    "assemble",
    "assemble_from_reading",
    "deep_linear",
    "lambda_dir",
    "lambda_dir_exact",
    "loci_from_reading",
    "normal_crossing",
    "normal_form",
    "nu",
    "nu_quadrature",
    "one_hidden_node",
    "posterior_moments",
    "regular",
    "riccati_v",
    "rrr",
    "v_frozen_zero",
    "width_one_chain",
]
