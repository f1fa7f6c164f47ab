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
    it = iter(leaves)

    def build(s):
        kind, keys, specs = s
        if kind == "leaf":
            return next(it)
        items = [build(sub) for sub in specs]
        if kind == "dict":
            return dict(zip(keys, items))
        return tuple(items) if kind == "tuple" else list(items)

    return build(spec)
