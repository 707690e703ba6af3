"""`np.einsum`, which Numba lacks, lowered to the operations it stands for, each with a derivative rule.

A contraction of two operands that share no index kept in the output (`ij,jk->ik`, `ij,j->i`,
`i,i->`) is one matrix product: each operand's axes permuted to (kept, contracted) and grouped into a
matrix or vector, then `@` (BLAS's GEMM in the forward, and by the rule of `@` in the adjoint too), the
product regrouped into the kept axes and permuted to the output's order. Any other contraction (an index
in both operands and in the output, `kc,kcr->kr`; three operands or more; none summed) multiplies the
operands broadcast over all their indices and sums the contracted axes. An index that one operand alone
has and the output has not is summed in that operand first; one operand alone is sums and a transpose.
"""
from ..ir import Attribute, BinOp, Call, Const, Slice, Subscript, Tuple


class Refused(Exception):
    """A subscripts string srcad does not lower: `args` are the construct and the hint for the user."""


def parse(spec, n_operands):
    """The operands' subscripts and the output's of `spec` (`"ij,jk->ik"`; without `->`, the output is
    the indices found once, in alphabetical order, as NumPy reads it)."""
    spec = spec.replace(" ", "")
    if "." in spec:
        raise Refused("np.einsum with an ellipsis (`...`)", "name every axis: np.einsum('bij,bjk->bik', a, b)")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != n_operands:
        raise Refused(f"np.einsum with {len(terms)} subscripts for {n_operands} operands",
                      "give one subscript per operand, separated by commas")
    if not arrow:
        output = "".join(sorted(c for c in set(inputs) - {","} if inputs.count(c) == 1))
    for term in terms + [output]:
        if not all(c.isalpha() for c in term):
            raise Refused(f"np.einsum subscripts {spec!r}", "use letters for indices, commas between operands")
        if len(set(term)) != len(term):
            raise Refused(f"np.einsum with an index repeated in one term ({term!r}: a diagonal or trace)",
                          "write np.diag(a) or np.trace(a), then contract that")
    if set(output) - set(inputs):
        raise Refused(f"np.einsum output index {sorted(set(output) - set(inputs))[0]!r} found in no operand",
                      "every output index must be an index of an operand")
    return terms, output


def contraction(terms, output, operands, temp):
    """The IR value of the contraction `terms -> output` of `operands` (names); `temp(e)` binds `e` to a
    new name and returns that name."""
    operands, terms = list(operands), list(terms)
    for k, term in enumerate(terms):      # an index only this operand has, and the output has not: summed here
        others = "".join(t for j, t in enumerate(terms) if j != k) + output
        operands[k], terms[k] = _summed(operands[k], term, [c for c in term if c not in others], temp)
    if len(operands) == 1:
        return _permuted(operands[0], terms[0], output, temp)
    both = set(terms[0]) & set(terms[1]) if len(operands) == 2 else set()
    if both and not both & set(output):
        return _matrix_product(terms, output, operands, temp)
    return _broadcast_product(terms, output, operands, temp)


def _summed(x, term, indices, temp):
    """`x` (axes `term`) summed over `indices`: (the sum, its axes)."""
    if indices and len(indices) == len(term):
        return temp(Call("np.sum", (x,))), ""
    for c in sorted(indices, key=term.index, reverse=True):
        x = temp(Call("np.sum", (x,), (("axis", Const(term.index(c))),)))
        term = term.replace(c, "")
    return x, term


def _permuted(x, term, order, temp):
    """`x` with axes `term` transposed to `order`."""
    if term == order:
        return x
    return temp(Call("np.transpose", (x, Tuple(tuple(Const(term.index(c)) for c in order)))))


def _extent(x, term, c):
    return Subscript(Attribute(x, "shape"), (Const(term.index(c)),))


def _grouped(x, term, groups, temp):
    """`x` (axes `term`) permuted to the axes of `groups` in order and reshaped to one axis per group
    (a group of one axis, or a vector, as it is)."""
    order = "".join(groups)
    permuted = _permuted(x, term, order, temp)
    if all(len(g) <= 1 for g in groups):
        return permuted
    sizes = tuple(_product_of_extents(x, term, g, temp) for g in groups if g)
    contiguous = temp(Call("np.ascontiguousarray", (permuted,)))
    return temp(Call("np.reshape", (contiguous, Tuple(sizes))))


def _product_of_extents(x, term, group, temp):
    size = _extent(x, term, group[0])
    for c in group[1:]:
        size = temp(BinOp("*", size, _extent(x, term, c)))
    return size


def _matrix_product(terms, output, operands, temp):
    """Two operands without a shared output index: (kept_a, summed) @ (summed, kept_b), regrouped."""
    (a, b), (ta, tb) = operands, terms
    summed = "".join(c for c in ta if c in tb)
    kept_a, kept_b = "".join(c for c in ta if c not in tb), "".join(c for c in tb if c not in ta)
    product = temp(BinOp("@", _grouped(a, ta, (kept_a, summed), temp), _grouped(b, tb, (summed, kept_b), temp)))
    kept = kept_a + kept_b
    if len(kept_a) > 1 or len(kept_b) > 1:
        shape = tuple([_extent(a, ta, c) for c in kept_a] + [_extent(b, tb, c) for c in kept_b])
        product = temp(Call("np.reshape", (temp(Call("np.ascontiguousarray", (product,))), Tuple(shape))))
    return _permuted(product, kept, output, temp)


def _broadcast_product(terms, output, operands, temp):
    """The operands broadcast over all indices (the output's first, then the summed), multiplied, and the
    summed axes summed (the last first)."""
    every = output + "".join(sorted({c for t in terms for c in t} - set(output)))
    product = None
    for x, term in zip(operands, terms):
        aligned = _permuted(x, term, "".join(c for c in every if c in term), temp)
        if term and len(term) < len(every):
            aligned = temp(Subscript(aligned, tuple(Slice() if c in term else Const(None) for c in every)))
        product = aligned if product is None else temp(BinOp("*", product, aligned))
    for axis in range(len(every) - 1, len(output) - 1, -1):
        product = temp(Call("np.sum", (product,), (("axis", Const(axis)),)) if axis else Call("np.sum", (product,)))
    return product
