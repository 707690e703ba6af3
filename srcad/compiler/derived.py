"""Functions derived from a compiled transform, for derivatives beyond one reverse sweep.

* `tangent_of(transformed)`: forward mode, `f_tangent(*args, *tangents) ->
  (*outputs, *output_tangents)` (one tangent per active argument), from the
  tangent pass (`ad/forward.py`) over the transform's primal IR;
* `gradient_of(transformed, d_out_types, active)`: the gradient function
  `f_vjp(*args, *d_outs) -> gradients` (`ad/vjp.py`: the forward's statements,
  then the adjoint's) transformed again as IR (`driver.transform_function`):
  its forward and adjoint give second derivatives, its own `gradient_of` the
  third, and its `tangent_of` Hessian-vector products (forward over reverse).

Both are made once per transform and arguments (kept on the `Transformed`)
and compiled under the compile lock; the printed code goes to the disk cache
by its content.
"""
from .ad.forward import tangent
from .ad.vjp import vjp_function
from .analysis.aliasing import analyse_aliasing
from .backends import cache
from .compiled import COMPILE_LOCK, Checked, plain_first
from .ir.facts import Bounds
from .ir.visit import called
from .opt.cleanup import eliminate_dead_code, fold_constants, simplify
from .opt.shared import compute_repeats_once
from .opt.zero_guards import unguarded
from .pipeline import copy_function
from .rows import Rows


class Tangent:
    """A compiled tangent function: ``tangent(*args, *tangents)`` returns ``(outputs, output_tangents)``,
    each a tuple with one entry per output; ``source`` is its code. Where the target runs one, the
    tangent with plain products (`plain`) runs first, and the one whose products are `cotangent_times`
    only where an output tangent holds a nan: tangents are linear in the tangents given, so the two differ
    only where a zero meets an inf or a nan (as the two adjoints do: `opt/plain_adjoint.py`)."""

    def __init__(self, dispatcher, plain, n_outputs, source, backend):
        self._dispatcher = dispatcher
        self._plain = plain
        self.n_outputs = n_outputs
        self.source = source
        self._backend = backend
        self._rows = {}

    def __call__(self, *args):
        result = plain_first(self._plain, self._dispatcher, lambda tangent: tangent(*args),
                             lambda result: result[self.n_outputs:])
        return result[:self.n_outputs], result[self.n_outputs:]

    def rows(self, args, tangent_rows, wanted, buffers):
        """The tangent for a batch of tangents in one compiled call (`rows.py`): `tangent_rows` one per
        active argument (leading axis: the rows), `buffers` one per output in `wanted` (leading axis: the
        rows) for its tangent. The arguments must not be written into (each row starts from them)."""
        def run(tangent):
            key = (tangent is self._plain, len(args), tuple(wanted))
            with COMPILE_LOCK:
                rows = self._rows.get(key)
                if rows is None:
                    rows = self._rows[key] = Rows(
                        tangent, self._backend, [f"arg{k}" for k in range(len(args))],
                        [f"tangent{k}_rows" for k in range(len(tangent_rows))],
                        [(self.n_outputs + k, f"out_tangent{k}_rows") for k in wanted])
            rows(args, tangent_rows, buffers)
            return buffers
        plain_first(self._plain, self._dispatcher, run)


def tangent_of(transformed):
    """The `Tangent` of `transformed` (for its active arguments), compiled on first use."""
    return _once(transformed, ("tangent, compiled",), lambda: _compile_tangent(transformed))


def tangent_function(transformed):
    """The tangent of `transformed` as IR (cleaned up, before target lowering), made once."""
    def made():
        fn = analyse_aliasing(tangent(copy_function(transformed.ir.primal)), [])
        for step in (fold_constants, simplify, eliminate_dead_code):   # (the aliasing facts keep the
            step(fn)                                                     # writes into shared memory)
        return fn
    return _once(transformed, ("tangent, IR",), made)


def _compile_tangent(transformed):
    backend = transformed.backend
    fn = compute_repeats_once(copy_function(tangent_function(transformed)))   # (as the adjoint: `opt/shared.py`)
    readable = backend.function_source(copy_function(fn), transformed.name)
    plain = _plain_tangent(fn) if backend.policy.plain_adjoint else None
    functions = [fn] + ([plain] if plain is not None else [])
    for f in functions:
        backend.lower(f)
    source, origins = backend.module_source(functions, transformed.name)
    path = cache.cache_dir() / f"{fn.name}_{cache.content_hash(source)[:20]}.py"
    cache.write_module(path, source)
    sites = transformed.ir.primal.facts.of(Bounds).sites
    dispatchers = [Checked(backend.load(path, source, f.name), path, origins, transformed.name, backend, sites)
                   for f in functions]
    return Tangent(dispatchers[0], dispatchers[1] if plain is not None else None, transformed.n_outputs, readable,
                   backend)


def _plain_tangent(fn):
    """A copy of the tangent IR `fn` with plain products, `<name>_plain`; None where it would be the same
    code, or where a custom rule's code runs (the user's code may turn a nan into a number)."""
    calls = called(fn.body)
    if "srcad.cotangent_times" not in calls or any(c.startswith("srcad.rule_") for c in calls):
        return None
    plain = copy_function(fn)
    plain.name = f"{fn.name}_plain"
    plain.body = unguarded(plain.body, set())
    return plain


def tangent_transform(transformed, arg_types, active):
    """The tangent function of `transformed` (arguments: the function's, then one tangent per active
    argument) as a `Transformed` of its own, to differentiate tangents again."""
    return _derived(transformed, "tangent", arg_types, active, lambda: tangent_function(transformed))


def gradient_of(transformed, arg_types, active, versioned=True):
    """The gradient function of `transformed` (arguments: the function's, then one cotangent per output;
    `arg_types` their types, `active` which are differentiated) as a `Transformed` of its own. `versioned`:
    made of the adjoint as compiled, its guarded stretches versioned (`ad/vjp.py`), where `transformed` is
    the user's function: faster second derivatives, for more code to compile at every order above."""
    versioned = versioned and transformed.order == 1
    return _derived(transformed, ("gradient", versioned), arg_types, active,
                    lambda: vjp_function(transformed.ir.forward, transformed.ir.adjoint, versioned))


def _derived(transformed, kind, arg_types, active, function_ir):
    """`driver.transform_function` of the IR `function_ir()` derived from `transformed`, once per kind,
    argument types and active mask."""
    from .driver import transform_function

    def made():
        derived = transform_function(function_ir(), arg_types, active, target=transformed.backend.name)
        derived.order = transformed.order + 1
        return derived
    return _once(transformed, (kind, tuple(arg_types), tuple(active)), made)


def _once(transformed, key, make):
    """`make()`, kept on `transformed` under `key` (made once, under the compile lock)."""
    made = transformed.derived.get(key)
    if made is None:
        with COMPILE_LOCK:
            made = transformed.derived.get(key)
            if made is None:
                made = transformed.derived[key] = make()
    return made


__all__ = ["Tangent", "gradient_of", "tangent_function", "tangent_of", "tangent_transform"]
