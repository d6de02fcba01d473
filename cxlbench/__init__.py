"""cxlbench: characterise the memory tiers AI training spills into.

The public API is small: `load` reads stored runs into a tidy DataFrame.
"""
__version__ = "0.1.0"


def load(paths, **kwargs):
    """Samples of one or more runs (run directories, or folders holding them) as one
    tidy pandas DataFrame, one row per sample. See cxlbench.results.store.load."""
    from cxlbench.results.store import load as _load
    return _load(paths, **kwargs)


__all__ = ["load", "__version__"]
