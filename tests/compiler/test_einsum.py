"""`np.einsum` in compiled code (Numba has none): lowered to matrix products, sums and broadcast products
(`srcad/compiler/front/einsum.py`); each program's result against NumPy's einsum, its gradient against
finite differences, at first and second order; the lowering chosen; the subscripts refused, by message."""
import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import TransformError, transform
from srcad.testing import check_function
from test_ir import second_order_check
from test_refusals import line_of

rng = np.random.default_rng(21)
ARR = numba.float64[::1]
ARR2 = numba.float64[:, ::1]
ARR3 = numba.float64[:, :, ::1]
SPEC = "ij,jk->ik"


def matrix_products(A, B, v):
    """Two operands sharing no output index: one `@` each, operands permuted and grouped as needed."""
    return (np.sum(np.sin(np.einsum("ij,jk->ik", A, B))) + np.sum(np.einsum("ij,kj->ik", A, B) ** 2)
            + np.sum(np.cos(np.einsum("ji,jk->ki", A, B))) + np.einsum("i,i->", v, v) * np.sum(np.einsum("ij,j", A, v))
            + np.sum(np.einsum("i,ij->j", v, B) ** 3) + np.sum(np.einsum(SPEC, A, B, optimize=True)))


def grouped_products(T, A, v):
    """Axes grouped into one matrix side (`ijk,jl->ikl`: i and k kept, j summed), an outer product."""
    return (np.sum(np.sin(np.einsum("ijk,jl->ikl", T, A))) + np.sum(np.einsum("ijk,ikl->jl", T, np.sin(T)) ** 2)
            + np.sum(np.tanh(np.einsum("i,j->ij", v, v))))


def batched_and_broadcast(T, A, v):
    """An index in both operands and the output (`kc,kcr->kr`, `bij,bjk->bik`), three operands, an index
    one operand alone has (summed there first)."""
    return (np.sum(np.sin(np.einsum("kc,kcr->kr", A, T))) + np.sum(np.einsum("bij,bjk->bik", T, np.cos(T)) ** 2)
            + np.sum(np.einsum("ij,ij->i", A, A) * v) + np.einsum("ab,bc,ca->", A, A, A)
            + np.sum(np.exp(np.einsum("ij,k->ik", A, v))))


def one_operand(T, A):
    """Transposes and sums: `ij->ji`, `ijk->kj`, `ij->`."""
    return (np.sum(np.sin(np.einsum("ij->ji", A)) * A.T) + np.sum(np.einsum("ijk->kj", T) ** 2)
            + np.einsum("ij->", A) ** 2)


CASES = [(matrix_products, lambda: (rng.normal(size=(3, 3)), rng.normal(size=(3, 3)), rng.normal(size=3))),
         (grouped_products, lambda: (rng.normal(size=(3, 3, 3)), rng.normal(size=(3, 3)), rng.normal(size=4))),
         (batched_and_broadcast, lambda: (rng.normal(size=(3, 3, 3)), rng.normal(size=(3, 3)), rng.normal(size=3))),
         (one_operand, lambda: (rng.normal(size=(2, 3, 4)), rng.normal(size=(3, 3))))]


@pytest.mark.parametrize("fn, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_contractions_against_numpy_and_finite_differences_at_first_and_second_order(fn, make):
    args = make()
    check_function(ad.function(fn), args, tuple(range(len(args))))
    second_order_check(fn, args, (True,) * len(args))


def test_a_contraction_without_a_shared_output_index_is_one_matrix_product():
    forward = transform(matrix_products, (ARR2, ARR2, ARR), (True, True, True)).source("forward")
    code = [line.strip() for line in forward.splitlines() if not line.strip().startswith("#")]
    assert "t = A @ B" in code, forward
    assert sum(" @ " in line for line in code) == 7 and not any("einsum" in line for line in code), forward
    batched = transform(batched_and_broadcast, (ARR3, ARR2, ARR), (True, True, True)).source("forward")
    code = [line.strip() for line in batched.splitlines() if not line.strip().startswith("#")]
    assert not any(" @ " in line or "einsum" in line for line in code) and "t = A[:, None, :]" in code, batched


def ellipsis(A):
    return np.sum(np.einsum("...ij->...ji", A))


def diagonal(A):
    return np.einsum("ii->", A)


def computed_subscripts(A, spec):
    return np.sum(np.einsum(spec + "->ji", A))


def too_few_subscripts(A):
    return np.sum(np.einsum("ij,jk->ik", A))


def unknown_output_index(A):
    return np.sum(np.einsum("ij->k", A))


@pytest.mark.parametrize("fn, message", [
    (ellipsis, r"np.einsum with an ellipsis .*name every axis"),
    (diagonal, r"np.einsum with an index repeated in one term \('ii'.*np.diag\(a\) or np.trace\(a\)"),
    (too_few_subscripts, r"np.einsum with 2 subscripts for 1 operands.*one subscript per operand"),
    (unknown_output_index, r"np.einsum output index 'k' found in no operand"),
])
def test_subscripts_srcad_does_not_lower_are_refused_naming_the_line(fn, message):
    with pytest.raises(TransformError, match=rf"{fn.__name__} .*line {line_of(fn, 'np.einsum')}\).*{message}"):
        transform(fn, (ARR2,), (True,))


def test_subscripts_that_are_not_a_constant_string_are_refused():
    with pytest.raises(TransformError, match=r"computed_subscripts .*np.einsum with subscripts that are not a "
                                             r"constant string.*np.einsum\('ij,jk->ik', a, b\)"):
        transform(computed_subscripts, (ARR2, numba.types.unicode_type), (True, False))
