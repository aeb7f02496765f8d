"""Constraints on recurrent matrices, registered with torch.nn.utils.parametrize.

One module per family, each building the dense matrix once per forward pass:

* :mod:`.householder` — products of Householder reflectors and the SVD form
  U diag(sigma) V^T (spectral paper §3-4);
* :mod:`.rotations` — VPNN plane rotations and fixed permutations (SGORNN paper eq. 2);
* :mod:`.kronecker` — Kronecker products of small factors (KRU paper §3, eq. 4);
* :mod:`.unitary` — the restricted-capacity unitary W of uRNN (Arjovsky et al. 2016);
* :mod:`.exponential` — W = expm(A - A^T) (expRNN).
"""
