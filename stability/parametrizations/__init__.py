"""Constraints on recurrent matrices, registered with torch.nn.utils.parametrize.

One module per family, each building the dense matrix once per forward pass:

* :mod:`.householder` — products of Householder reflectors and the SVD form
  U diag(sigma) V^T (spectral paper §3-4);
* :mod:`.rotations` — VPNN plane rotations and fixed permutations (SGORNN paper eq. 2);
* :mod:`.kronecker` — Kronecker products of small factors (KRU paper §3, eq. 4);
* :mod:`.unitary` — the restricted-capacity unitary W of uRNN (Arjovsky et al. 2016);
* :mod:`.exponential` — W = expm(A - A^T) (expRNN).
"""

from __future__ import annotations

from ..core.faces import lazy

# The room's face (docs/architecture.md, "A room's face"): the names other rooms, pages/, app.py and
# benchmarks/ may import from it, each -> the module here that holds it (None: that module itself), imported
# on first use, so that importing the room imports none of its modules.
_FACE = {
    "SKEW_INITS": "exponential", "SkewExponential": "exponential", "skew_block_init": "exponential",
    "register_householder_product": "householder", "register_householder_svd": "householder",
    "register_rectangular_householder_svd": "householder", "check_factor_sizes": "kronecker",
    "factor_parameter_count": "kronecker", "kron_chain": "kronecker", "kronecker": "kronecker",
    "kronecker_factors": "kronecker", "unitarity_penalty": "kronecker", "register_plane_rotations": "rotations",
    "rotation_sublayers": "rotations", "RestrictedUnitary": "unitary", "initial_factors": "unitary",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy(__name__, _FACE)
