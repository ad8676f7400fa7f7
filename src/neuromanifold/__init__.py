"""neuromanifold: the geometry of neural-network parametrizations.

Two halves share one vocabulary (Jacobian, NTK = J Jᵀ, Fisher = Jᵀ H J, invariants):

* :mod:`neuromanifold.linear` — linear (convolutional and fully connected) networks as
  polynomial maps: end-to-end filter, NTK in closed form, conserved invariants, fibers, and
  whether gradient flow is a Riemannian gradient flow on function space.
* :mod:`neuromanifold.singular` — dead directions of a trained network at one frozen
  checkpoint: detectors, the directional-Fisher order read, classification, Watanabe's triple.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
