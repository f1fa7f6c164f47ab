"""Flattening nested arguments (dicts, lists, tuples) into flat tensor lists."""


def flatten(tree):
    """Returns (leaves, spec); dict keys are visited in sorted order."""
    if isinstance(tree, dict):
        keys = sorted(tree)
        leaves, specs = [], []
        for k in keys:
            sub, spec = flatten(tree[k])
            leaves += sub
            specs.append(spec)
        return leaves, ("dict", keys, specs)
    if isinstance(tree, (list, tuple)):
        leaves, specs = [], []
        for item in tree:
            sub, spec = flatten(item)
            leaves += sub
            specs.append(spec)
        return leaves, (type(tree).__name__, None, specs)
    return [tree], ("leaf", None, None)


def unflatten(spec, leaves):
    return _build(spec, iter(leaves))


def _build(spec, it):
    # A module-level function, not a closure: a recursive closure is a
    # reference cycle that would keep `leaves` (result arrays) alive until
    # the garbage collector runs.
    kind, keys, specs = spec
    if kind == "leaf":
        return next(it)
    items = [_build(sub, it) for sub in specs]
    if kind == "dict":
        return dict(zip(keys, items))
    return tuple(items) if kind == "tuple" else list(items)


def leaf_names(spec):
    """The dotted path of every leaf of `spec`, in flatten order: dict keys
    and list/tuple positions joined by "." ({"l1": {"w": ..}} -> "l1.w"; a
    bare leaf is "")."""
    names = []

    def walk(s, prefix):
        kind, keys, specs = s
        if kind == "leaf":
            names.append(prefix)
            return
        labels = keys if kind == "dict" else range(len(specs))
        for label, sub in zip(labels, specs):
            walk(sub, f"{prefix}.{label}" if prefix else str(label))

    walk(spec, "")
    return names


def spec_to_json(spec):
    """`spec` as JSON-ready lists (dict keys must be strings or ints)."""
    kind, keys, specs = spec
    return [kind, keys, None if specs is None else [spec_to_json(s) for s in specs]]


def spec_from_json(data):
    """The spec spec_to_json wrote."""
    kind, keys, specs = data
    return (kind, keys, None if specs is None else [spec_from_json(s) for s in specs])
