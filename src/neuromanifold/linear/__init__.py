"""Linear networks as polynomial maps (spec: ``linear_networks.md``).

An LCN's end-to-end filter is the product of its layers' dilated filters; this subpackage computes
that map ``μ``, its Jacobian and NTK in closed form (with torch ``jacrev`` oracles), the conserved
invariants of gradient flow, the rescaling lemma, points of the ``(v, δ)``-fiber, the metric
``g_v = K⁺`` on ``T_vM`` and gradient flows in parameter and function space. FC counterparts are
prefixed ``fc_``. Everything is float64 numpy; torch is used only by the ``*_reference`` oracles.
"""

from neuromanifold.linear.architecture import (
    FC,
    LCN,
    flatten_params,
    unflatten_params,
    validate_params,
)
from neuromanifold.linear.converge import ConvergenceReport, convergence_experiment
from neuromanifold.linear.fiber import fc_fiber, fiber_of_params, lcn_fiber
from neuromanifold.linear.fiber_algebraic import algebraic_fiber
from neuromanifold.linear.fiber_numeric import numeric_fiber
from neuromanifold.linear.fiber_report import FiberReport
from neuromanifold.linear.flow import (
    FlowResult,
    FunctionFlowResult,
    fc_balanced_flow,
    function_space_flow,
    gradient_descent,
    gradient_flow,
    invariant_drift,
    invariants,
    param_grad,
)
from neuromanifold.linear.invariants import delta, fc_delta, sq_norms
from neuromanifold.linear.locus import LocusReport, classify_locus
from neuromanifold.linear.losses import FunctionLoss, QuadraticLoss, SquaredLoss
from neuromanifold.linear.metric import (
    RTOL_RANK,
    SmoothPointReport,
    is_smooth_point,
    jacobian_rank,
    metric_inner,
    metric_tensor,
    riemannian_gradient,
    tangent_basis,
    tangent_condition_number,
)
from neuromanifold.linear.metric_compare import DeltaMetric, MetricComparison, compare_metrics
from neuromanifold.linear.metric_pair import (
    METRIC_AGREE_TOL,
    TANGENT_SIN_TOL,
    MetricPair,
    metric_pair,
    metric_pair_reference,
)
from neuromanifold.linear.normalize import (
    LCNReduction,
    normal_form_note,
    reduce_lcn,
    reduce_params,
)
from neuromanifold.linear.ntk import (
    complement_products,
    fc_balanced_operator,
    fc_jacobian,
    fc_ntk,
    fc_ntk_apply,
    gram_blocks,
    jacobian,
    jacobian_blocks,
    mu_and_jacobian,
    ntk,
)
from neuromanifold.linear.polynomial import (
    dilate,
    dilated_factors,
    fc_mu,
    mu,
    mul_dilated,
    poly_mul,
)
from neuromanifold.linear.reference import (
    apply_network,
    fc_jacobian_reference,
    fc_ntk_reference,
    jacobian_reference,
    mu_reference,
    mu_torch,
    ntk_reference,
)
from neuromanifold.linear.relu import (
    ReluCNN,
    ReluMLP,
    relu_invariants,
    relu_ntk,
    relu_ntk_reference,
)
from neuromanifold.linear.relu_fiber import relu_fiber
from neuromanifold.linear.relu_global import global_first_order_dimension
from neuromanifold.linear.rescale import (
    fc_balanced_params,
    lemma_scalings,
    lemma_squared_norms,
    rescale_to_delta,
)
from neuromanifold.linear.sheets import regrouping_pairs
from neuromanifold.linear.solve import (
    NewtonResult,
    fiber_newton,
    ntk_closed_form,
    ntk_from_function,
    solve_fiber_point,
)
from neuromanifold.linear.survey import SurveyResult, run_survey

# grouped by topic (sorted within each group), so RUF022's global sort is switched off
__all__ = [  # noqa: RUF022
    # architectures and parameters
    "FC",
    "LCN",
    "flatten_params",
    "unflatten_params",
    "validate_params",
    # reductions of spec §1.2
    "LCNReduction",
    "normal_form_note",
    "reduce_lcn",
    "reduce_params",
    # parametrisation map
    "dilate",
    "dilated_factors",
    "fc_mu",
    "mu",
    "mul_dilated",
    "poly_mul",
    # Jacobian and NTK
    "complement_products",
    "fc_balanced_operator",
    "fc_jacobian",
    "fc_ntk",
    "fc_ntk_apply",
    "gram_blocks",
    "jacobian",
    "jacobian_blocks",
    "mu_and_jacobian",
    "ntk",
    # invariants and the rescaling lemma
    "delta",
    "fc_balanced_params",
    "fc_delta",
    "lemma_scalings",
    "lemma_squared_norms",
    "rescale_to_delta",
    "sq_norms",
    # fiber points and K_δ(v)
    "NewtonResult",
    "fiber_newton",
    "ntk_closed_form",
    "ntk_from_function",
    "solve_fiber_point",
    # fibers of (v, δ): algebraic and numeric routes, NTK determinacy
    "FiberReport",
    "algebraic_fiber",
    "fc_fiber",
    "fiber_of_params",
    "lcn_fiber",
    "numeric_fiber",
    "regrouping_pairs",
    # smooth point, crossing or critical point
    "LocusReport",
    "classify_locus",
    # metric on T_vM and regularity
    "RTOL_RANK",
    "SmoothPointReport",
    "is_smooth_point",
    "jacobian_rank",
    "metric_inner",
    "metric_tensor",
    "riemannian_gradient",
    "tangent_basis",
    "tangent_condition_number",
    # comparing the metrics of several δ at one v
    "DeltaMetric",
    "METRIC_AGREE_TOL",
    "MetricComparison",
    "MetricPair",
    "TANGENT_SIN_TOL",
    "compare_metrics",
    "metric_pair",
    # losses, flows and drift monitors
    "FlowResult",
    "FunctionFlowResult",
    "FunctionLoss",
    "QuadraticLoss",
    "SquaredLoss",
    "fc_balanced_flow",
    "function_space_flow",
    "gradient_descent",
    "gradient_flow",
    "invariant_drift",
    "invariants",
    "param_grad",
    # shallow ReLU networks
    "ReluCNN",
    "ReluMLP",
    "global_first_order_dimension",
    "relu_fiber",
    "relu_invariants",
    "relu_ntk",
    "relu_ntk_reference",
    # experiments: the determinacy survey and convergence
    "ConvergenceReport",
    "SurveyResult",
    "convergence_experiment",
    "run_survey",
    # brute-force oracles
    "apply_network",
    "metric_pair_reference",
    "fc_jacobian_reference",
    "fc_ntk_reference",
    "jacobian_reference",
    "mu_reference",
    "mu_torch",
    "ntk_reference",
]
