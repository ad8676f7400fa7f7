"""Build script for the optional C kernel; the project's metadata lives in pyproject.toml.

``neuromanifold.linear._lcn_kernel`` (the 1-D LCN NTK by diagonal running sums) is optional:
if no C compiler is available the build skips it and `neuromanifold.linear.ntk` uses the dense
product ``J Jᵀ`` (`neuromanifold.linear._compiled`).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "neuromanifold.linear._lcn_kernel",
            sources=["src/neuromanifold/linear/_lcn_kernel.c"],
            extra_compile_args=["-O3", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
